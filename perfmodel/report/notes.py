"""Notes a prediction carries as data: what every view prints beside the numbers.

A :class:`~perfmodel.report.step.StepReport` holds its notes (``notes``); the ones a user must
see (:func:`is_printed_note`) are printed by every view (``predict``, a ``--gpus`` curve, the
``compare`` tables) and are in ``--json`` and sweep rows, so a view never computes a note of its
own that another view would miss (issue 28, item 4: the "no PCIe peer-to-peer" note of an
RTX 4090 box was printed by one view only).

:func:`host_memory_notes` states which GPU pairs of a run talk through host memory, by local id,
so that on a DGX-1 (NVLink hybrid cube mesh, 12 of 28 pairs without NVLink and with PCIe
peer-to-peer refused across the CPUs) it does not read as if every transfer were staged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfmodel.topology import Topology

#: Beginnings of the notes every view prints (the rest describe the lowering, in ``--json``):
#: the host-memory and NCCL P2P notes (``note:``), the input pipeline
#: (:mod:`perfmodel.host.input_pipeline`), expert / context parallelism and mixture-of-experts
#: accounting (:mod:`perfmodel.parallel.lower_pipeline`), and the hardware itself: a
#: datasheet-only GPU (``hardware:``) and a cloud instance's transport and price (``cloud:``,
#: :func:`perfmodel.api.hardware_notes`).
PRINTED_PREFIXES: tuple[str, ...] = (
    "note:",
    "input pipeline",
    "expert parallel",
    "context parallel",
    "mixture of experts",
    "hardware:",
    "cloud:",
)


def is_printed_note(text: str) -> bool:
    """Whether every view prints this note (see :data:`PRINTED_PREFIXES`).

    >>> is_printed_note("note: GPU pairs gpu0-gpu1 talk through host memory")
    True
    >>> is_printed_note("pipeline: 4 stages x 1 chunks, 8 micro-batches")
    False
    """
    return text.startswith(PRINTED_PREFIXES)


def _pair_text(pairs: Sequence[tuple[str, str]], limit: int = 6) -> str:
    """``gpu0-gpu5, gpu0-gpu6, ...``: the first ``limit`` pairs."""
    shown = ", ".join(f"{a}-{b}" for a, b in pairs[:limit])
    return shown + (", ..." if len(pairs) > limit else "")


def host_memory_notes(topology: Topology, gpus: Sequence[str]) -> tuple[str, ...]:
    """Notes naming the GPU pairs of ``gpus`` that talk through host memory, or ``()``.

    NCCL connects two GPUs of one server peer-to-peer over NVLink, or over PCIe when both GPUs
    and the host allow it; otherwise its SHM transport stages the transfers in CPU memory
    (``src/transport/shm.cc``; :meth:`perfmodel.comm.links.DirectedLinks.shm_cpu` decides each
    pair). The note lists the pairs of the first server the run uses, by local id (every
    server of a catalogue cluster is a copy of it), the share of the server's pairs they are,
    and why: the GPU model has no PCIe peer-to-peer (``GPUSpec.pcie_p2p``, e.g. GeForce RTX
    4090), peer-to-peer is disabled for the system (``p2p = false``, ``--p2p off``), or it is
    refused between those pairs (``nvidia-smi topo -p2p r``, NCCL's P2P level); the NCCL rule
    that refuses them follows as its own note
    (:func:`perfmodel.topology.importers.nccl_p2p_rule_note`).
    """
    from perfmodel.comm.links import DirectedLinks

    links = DirectedLinks(topology)
    # the topology's GPUs (every GPU node, in rank order) as a set: a membership test that
    # does not make the servers of a lazily built cluster (``topology/lazy.py``), where
    # reading each node's kind made all 2,048 servers of a 16,384-GPU one (~0.15 s)
    is_gpu = frozenset(topology.gpus)
    members = [g for g in gpus if g in is_gpu]
    if len(members) < 2 or not links.uses_shm(members):
        return ()
    server = links.server
    first = server[members[0]]
    mine = [g for g in members if server[g] == first]
    lid = {g: str(topology.graph.nodes[g].get("local_id", g)) for g in mine}
    pairs = [
        (lid[a], lid[b])
        for i, a in enumerate(mine)
        for b in mine[i + 1 :]
        if links.shm_cpu(a, b) is not None or links.shm_cpu(b, a) is not None
    ]
    n = len(mine)
    total = n * (n - 1) // 2
    every = len(pairs) == total
    scope = " of each server" if len({server[g] for g in members}) > 1 else ""
    if not pairs:  # only in another server of an irregular system: said without pairs
        subject, verb = "some GPU pairs", "talk"
    elif total == 1:
        subject, verb = f"the GPU pair {_pair_text(pairs)}", "talks"
    elif every:
        subject, verb = f"all {total} GPU pairs{scope} ({_pair_text(pairs)})", "talk"
    else:
        subject, verb = (
            f"{len(pairs)} of the {total} GPU pairs{scope} ({_pair_text(pairs)})",
            "talk",
        )
    no_p2p_models = sorted(
        {
            topology.gpu_spec(g).name
            for g in mine
            if not topology.gpu_spec(g).pcie_p2p and not topology.p2p_capable(g)
        }
    )
    if no_p2p_models:
        why = f"{', '.join(no_p2p_models)}: no PCIe peer-to-peer"
    elif any(not topology.p2p_capable(g) for g in mine):
        why = "peer-to-peer disabled for this system (p2p = false / --p2p off)"
    else:
        why = "no NVLink between them, PCIe peer-to-peer refused (nvidia-smi topo -p2p r, NCCL's P2P level)"
    out = [
        f"note: {subject} {verb} through host memory ({why}): NCCL's SHM transport stages "
        f"{'its' if verb == 'talks' else 'their'} transfers in CPU memory"
        + ("" if every else "; the other pairs talk directly (NVLink or PCIe peer-to-peer)")
    ]
    from perfmodel.topology.nccl_p2p import nccl_p2p_rule_note

    rule = nccl_p2p_rule_note(topology, members)
    if rule:
        out.append(rule)
    return tuple(out)


__all__ = ["PRINTED_PREFIXES", "host_memory_notes", "is_printed_note"]
