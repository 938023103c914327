"""Export a predicted step as Chakra execution traces, one file per simulated rank.

ASTRA-sim and the rest of the MLCommons Chakra tooling read a workload as one ET file per rank
(``<prefix>.<rank>.et``; format and schema version in :mod:`perfmodel.workload.chakra_et`). This
module turns the task graph of a prediction, with the start and end times of its timeline, into
those files:

============================  ======================================================================
task                          Chakra node (attributes)
============================  ======================================================================
compute, recompute, optimizer ``COMP_NODE`` (``is_cpu_op`` false)
host work on the CPU          ``COMP_NODE`` (``is_cpu_op`` true)
host -> device copy (``h2d``) ``MEM_LOAD_NODE`` (``tensor_size`` bytes)
device -> host copy (``d2h``) ``MEM_STORE_NODE`` (``tensor_size`` bytes)
collective                    ``COMM_COLL_NODE`` (``comm_type``, ``comm_size`` bytes, ``pg_name``:
                              the group's ranks joined by ``_``)
pipeline send/recv            ``COMM_SEND_NODE`` on the sender (``comm_dst``, ``comm_tag``,
                              ``comm_size``); a ``COMM_RECV_NODE`` with the same tag on the
                              receiver when the receiver is simulated too
============================  ======================================================================

Node ids are the task ids (a receive node gets ``len(tasks) + task id``), so they are unique
within a file. Dependencies: ``data_deps`` are the task's dependencies on the same rank (a
dependency on another rank's send becomes one on the local receive node); ``ctrl_deps`` is the
previous task of the same stream (a CUDA stream runs its kernels in program order; ASTRA-sim has no
streams, so the order is stated). ``start_time_micros`` / ``duration_micros`` come from the
timeline (rounded to whole microseconds, the schema's unit); nodes keep ``perfmodel_*``
attributes with the exact seconds and the task's kind and stream.

What is not exact: perfmodel simulates one representative of each group of symmetric ranks
(``TaskGraph.multiplicity``); only those ranks get a file. A tensor-parallel collective that the
lowering coarsened into one task per segment carries its duration but no byte count
(``comm_size`` 0, ``perfmodel_bytes_known`` false), as does a parameter-server transfer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import CommKind, Task, TaskKind
from perfmodel.sim.engine import Timeline
from perfmodel.workload.chakra_et import (
    CHAKRA_SCHEMA,
    Attr,
    AttrKind,
    CommType,
    Node,
    NodeType,
    write_trace,
)

_COMM_TYPE = {
    CollectiveOp.ALLREDUCE: CommType.ALL_REDUCE,
    CollectiveOp.ALLGATHER: CommType.ALL_GATHER,
    CollectiveOp.REDUCESCATTER: CommType.REDUCE_SCATTER,
    CollectiveOp.BROADCAST: CommType.BROADCAST,
    CollectiveOp.REDUCE: CommType.REDUCE,
    CollectiveOp.ALLTOALL: CommType.ALL_TO_ALL,
}


def default_ranks(timeline: Timeline) -> dict[str, int]:
    """Rank of every device named in the graph (simulated devices and group members), in sorted
    order; pass the topology's GPU order instead where it is known."""
    names: set[str] = set(timeline.graph.devices)
    for t in timeline.graph.tasks:
        if t.comm is not None:
            for g in (t.comm.group, *t.comm.siblings):
                names.update(g)
    return {d: i for i, d in enumerate(sorted(names))}


def complete_ranks(timeline: Timeline, ranks: Mapping[str, int] | None) -> dict[str, int]:
    """``ranks`` plus a rank, after the highest given, for every other device the graph names
    (host CPUs of a CPU-merge or parameter-server plan), in sorted order."""
    if ranks is None:
        return default_ranks(timeline)
    out = dict(ranks)
    nxt = max(out.values(), default=-1) + 1
    for name in sorted(default_ranks(timeline)):
        if name not in out:
            out[name] = nxt
            nxt += 1
    return out


def _micros(seconds: float) -> int:
    return max(0, round(seconds * 1e6))


def _common_attrs(t: Task, start_s: float, end_s: float) -> list[Attr]:
    attrs = [
        Attr("perfmodel_kind", AttrKind.STRING, t.kind.value),
        Attr("perfmodel_stream", AttrKind.STRING, t.stream),
        Attr("perfmodel_duration_s", AttrKind.DOUBLE, end_s - start_s),
    ]
    if t.microbatch >= 0:  # which micro-batch (the importer reads one micro-batch's layers)
        attrs.append(Attr("perfmodel_microbatch", AttrKind.INT64, t.microbatch))
    return attrs


def chakra_nodes(
    timeline: Timeline, ranks: Mapping[str, int] | None = None
) -> dict[int, list[Node]]:
    """``{rank: nodes}`` for every simulated device of ``timeline`` (see the module docstring).

    Devices missing from ``ranks`` (host CPUs) are numbered after it (:func:`complete_ranks`).
    """
    g = timeline.graph
    ranks = complete_ranks(timeline, ranks)
    simulated = set(g.devices)
    n_tasks = len(g.tasks)
    per: dict[str, list[Node]] = {d: [] for d in g.devices}
    # (send task id, receiving device) -> recv node id; (collective task id, other member) -> the
    # member's mirror of that collective
    recv_of: dict[tuple[int, str], int] = {}
    prev_on_stream: dict[tuple[str, str], int] = {}
    for t in g.tasks:
        s, e = timeline.start_s[t.tid], timeline.end_s[t.tid]
        data = sorted(
            recv_of.get((d, t.device), d)
            for d in t.deps
            if g.tasks[d].device == t.device or (d, t.device) in recv_of
        )
        prev = prev_on_stream.get((t.device, t.stream))
        ctrl = (prev,) if prev is not None and prev not in t.deps else ()
        prev_on_stream[(t.device, t.stream)] = t.tid
        attrs = _common_attrs(t, s, e)
        spec = t.comm
        ntype = NodeType.COMP_NODE
        if t.kind in (TaskKind.COMPUTE, TaskKind.RECOMPUTE, TaskKind.OPTIMIZER):
            attrs.append(Attr("is_cpu_op", AttrKind.BOOL, False))
        elif t.kind is TaskKind.HOST and spec is not None and spec.kind is CommKind.HOST:
            ntype = NodeType.MEM_LOAD_NODE if t.stream == "h2d" else NodeType.MEM_STORE_NODE
            attrs += [
                Attr("is_cpu_op", AttrKind.BOOL, False),
                Attr("tensor_size", AttrKind.UINT64, round(spec.message_bytes)),
            ]
        elif t.kind is TaskKind.HOST:
            attrs.append(Attr("is_cpu_op", AttrKind.BOOL, True))
        elif t.kind is TaskKind.SENDRECV and spec is not None and len(spec.group) == 2:
            src, dst = spec.group
            nbytes = round(spec.message_bytes)
            ntype = NodeType.COMM_SEND_NODE
            p2p = (
                Attr("is_cpu_op", AttrKind.BOOL, False),
                Attr("comm_src", AttrKind.INT32, ranks[src]),
                Attr("comm_dst", AttrKind.INT32, ranks[dst]),
                Attr("comm_tag", AttrKind.INT32, t.tid),
                Attr("comm_size", AttrKind.INT64, nbytes),
                Attr("tensor_size", AttrKind.UINT64, nbytes),
            )
            attrs += p2p
            if dst in simulated and dst != t.device:
                rid = n_tasks + t.tid
                recv_of[(t.tid, dst)] = rid
                per[dst].append(
                    Node(
                        rid,
                        f"recv {t.label}",
                        NodeType.COMM_RECV_NODE,
                        (),
                        (),
                        _micros(s),
                        _micros(e - s),
                        (*_common_attrs(t, s, e), *p2p),
                    )
                )
        else:  # collectives, and transfers without a spec (parameter server)
            ntype = NodeType.COMM_COLL_NODE
            known = spec is not None and spec.op in _COMM_TYPE
            ctype = _COMM_TYPE[spec.op] if known else CommType.ALL_REDUCE
            attrs += [
                Attr("is_cpu_op", AttrKind.BOOL, False),
                Attr("comm_type", AttrKind.INT64, int(ctype)),
                Attr("comm_size", AttrKind.INT64, round(spec.message_bytes) if known else 0),
                Attr("perfmodel_bytes_known", AttrKind.BOOL, known),
            ]
            if known:
                group = sorted(ranks[m] for m in spec.group)
                attrs += [
                    Attr("pg_name", AttrKind.STRING, "_".join(map(str, group))),
                    Attr("perfmodel_comm_class", AttrKind.STRING, spec.kind.value),
                ]
                _mirror_collective(t, spec.group, simulated, n_tasks, recv_of, per, attrs, s, e)
        per[t.device].append(
            Node(
                t.tid,
                t.label or t.kind.value,
                ntype,
                ctrl,
                tuple(data),
                _micros(s),
                _micros(e - s),
                tuple(attrs),
            )
        )
    return {ranks[d]: nodes for d, nodes in per.items()}


def _mirror_collective(
    t: Task,
    group: tuple[str, ...],
    simulated: set[str],
    n_tasks: int,
    mirror_of: dict[tuple[int, str], int],
    per: dict[str, list[Node]],
    attrs: list[Attr],
    start_s: float,
    end_s: float,
) -> None:
    """Give every other simulated member of ``t``'s group its own node of the collective.

    The lowering books some collectives that span simulated ranks (the tied-embedding gradient
    all-reduce between the first and the last pipeline stage) as one task on one rank, with
    dependencies on the other rank's tasks. In Chakra every rank issues the collective itself: the
    member's node (id ``2 x len(tasks) + task id``) depends on the task's dependencies on that
    member, and that member's tasks that wait for the collective depend on it.
    """
    for member in group:
        if member == t.device or member not in simulated:
            continue
        mid = 2 * n_tasks + t.tid
        mirror_of[(t.tid, member)] = mid
        deps = tuple(
            sorted(mirror_of.get((d, member), d) for d in t.deps if d in _local_ids(per, member))
        )
        per[member].append(
            Node(
                mid,
                t.label or t.kind.value,
                NodeType.COMM_COLL_NODE,
                (),
                deps,
                _micros(start_s),
                _micros(end_s - start_s),
                tuple(attrs),
            )
        )


def _local_ids(per: dict[str, list[Node]], device: str) -> set[int]:
    """Ids of the nodes already written for ``device``."""
    return {n.id for n in per[device]}


def _meta_attr(name: str, value: object) -> Attr:
    """A ``GlobalMetadata`` attribute of a Python value (text, integer, float, flag)."""
    if isinstance(value, bool):
        return Attr(name, AttrKind.BOOL, value)
    if isinstance(value, int):
        return Attr(name, AttrKind.INT64, value)
    if isinstance(value, float):
        return Attr(name, AttrKind.DOUBLE, value)
    return Attr(name, AttrKind.STRING, str(value))


def write_chakra(
    timeline: Timeline,
    directory: str | os.PathLike[str],
    *,
    ranks: Mapping[str, int] | None = None,
    prefix: str = "perfmodel",
    meta: Mapping[str, object] | None = None,
) -> list[Path]:
    """Write ``<directory>/<prefix>.<rank>.et`` for every simulated rank; returns the paths.

    ``meta``: more ``GlobalMetadata`` attributes, ``perfmodel_<key>`` in every file (what
    ``model import-chakra`` needs to read the trace back without hand repair: the GPU, the
    parameter count, the precision, the plan; :func:`perfmodel.api.chakra_metadata`)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ranks = complete_ranks(timeline, ranks)
    by_rank = chakra_nodes(timeline, ranks)
    paths = []
    extra = dict(meta or {})
    for rank, nodes in sorted(by_rank.items()):
        attrs = [
            Attr("schema", AttrKind.STRING, CHAKRA_SCHEMA),
            Attr("producer", AttrKind.STRING, "perfmodel"),
            Attr("rank", AttrKind.INT64, rank),
            Attr("simulated_ranks", AttrKind.INT64_LIST, tuple(sorted(by_rank))),
            Attr("multiplicity", AttrKind.INT64, timeline.graph.multiplicity),
            Attr("fidelity", AttrKind.STRING, timeline.fidelity),
            *(_meta_attr(f"perfmodel_{k}", v) for k, v in extra.items() if v is not None),
        ]
        p = out / f"{prefix}.{rank}.et"
        write_trace(p, nodes, attrs)
        paths.append(p)
    return paths
