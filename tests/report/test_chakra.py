"""Chakra execution-trace export: the protobuf codec against hand-encoded bytes, and the traces
of a 3D-parallel GPT plan parsed back and checked against the task graph (node counts, bytes,
durations, dependency order)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from perfmodel.api import Scenario, predict, topology_of
from perfmodel.cli import main
from perfmodel.errors import ParseError
from perfmodel.parallel.taskgraph import TaskKind
from perfmodel.report.chakra import write_chakra
from perfmodel.workload.chakra_et import (
    ET_VERSION,
    Attr,
    AttrKind,
    Node,
    NodeType,
    encode_node,
    read_trace,
    write_trace,
)

GPT_3D = Scenario(
    system="dgx-a100",
    model="gpt",
    model_args={"hidden": 256, "layers": 4, "heads": 4, "seq_len": 128, "vocab": 1000},
    global_batch=16,
    dp=2,
    tp=2,
    pp=2,
    microbatch=2,
    precision="bf16",
    fidelity="simulated",
)


def test_node_bytes_by_hand() -> None:
    # id=1: key (1<<3|0)=0x08, 0x01; name "a": key 0x12, len 1, 'a'; type COMP_NODE=4: 0x18 0x04;
    # data_deps [300] packed: key (5<<3|2)=0x2a, len 2, varint 300 = 0xac 0x02
    n = Node(1, "a", NodeType.COMP_NODE, data_deps=(300,))
    assert encode_node(n) == b"\x08\x01\x12\x01a\x18\x04\x2a\x02\xac\x02"
    # attr 10 { name 1 "x"; int32_val 7 = -1 (ten-byte two's complement varint) }
    a = encode_node(Node(0, "", NodeType.INVALID_NODE, attrs=(Attr("x", AttrKind.INT32, -1),)))
    assert a == b"\x52\x0e\x0a\x01x\x38" + b"\xff" * 9 + b"\x01"


def test_round_trip_every_attr_kind(tmp_path) -> None:
    attrs = (
        Attr("d", AttrKind.DOUBLE, 1.25),
        Attr("i32", AttrKind.INT32, -7),
        Attr("i64", AttrKind.INT64, -(2**40)),
        Attr("u64", AttrKind.UINT64, 2**63 + 5),
        Attr("b", AttrKind.BOOL, True),
        Attr("s", AttrKind.STRING, "héllo"),
        Attr("il", AttrKind.INT64_LIST, (3, -4, 5)),
        Attr("ul", AttrKind.UINT64_LIST, (0, 2**40)),
        Attr("sl", AttrKind.STRING_LIST, ("a", "bc")),
    )
    nodes = [
        Node(0, "first", NodeType.COMP_NODE, duration_micros=12, attrs=attrs),
        Node(
            7,
            "second",
            NodeType.COMM_COLL_NODE,
            ctrl_deps=(0,),
            data_deps=(0, 3),
            start_time_micros=9,
        ),
    ]
    p = tmp_path / "t.0.et"
    write_trace(p, nodes, [Attr("rank", AttrKind.INT64, 0)])
    t = read_trace(p)
    assert t.version == ET_VERSION and t.meta("rank") == 0
    assert list(t.nodes) == nodes


def test_truncated_or_foreign_file_is_a_parse_error(tmp_path) -> None:
    p = tmp_path / "t.et"
    write_trace(p, [Node(0, "n", NodeType.COMP_NODE)])
    p.write_bytes(p.read_bytes()[:-2])
    with pytest.raises(ParseError, match="runs past the end"):
        read_trace(p)
    q = tmp_path / "x.et"
    q.write_bytes(b"\x02\x08\x01")  # a message without a version string
    with pytest.raises(ParseError, match="not a Chakra ET"):
        read_trace(q)
    with pytest.raises(ParseError):
        read_trace(tmp_path / "missing.et")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    r = predict(GPT_3D, baseline=False)
    ranks = {g: i for i, g in enumerate(topology_of(GPT_3D).gpus)}
    out = tmp_path_factory.mktemp("chakra")
    paths = write_chakra(r.timeline, out, ranks=ranks)
    return r.timeline, ranks, {int(p.name.split(".")[1]): read_trace(p) for p in paths}


def test_one_file_per_simulated_rank(exported) -> None:
    tl, ranks, traces = exported
    assert sorted(traces) == sorted(ranks[d] for d in tl.graph.devices)
    assert len(traces) == 2  # one representative per pipeline stage (dp and tp symmetric)
    for rank, t in traces.items():
        assert t.meta("rank") == rank and t.meta("multiplicity") == tl.graph.multiplicity == 4


def test_node_counts_bytes_and_durations_match_the_task_graph(exported) -> None:
    tl, ranks, traces = exported
    g = tl.graph
    for dev in g.devices:
        t = traces[ranks[dev]]
        tasks = [x for x in g.tasks if x.device == dev]
        recvs = [
            x for x in g.tasks if x.kind is TaskKind.SENDRECV and x.comm and x.comm.group[1] == dev
        ]
        # collectives booked on another simulated rank whose group includes this one: mirrored
        mirrors = [
            x
            for x in g.tasks
            if x.kind is TaskKind.COLLECTIVE
            and x.device != dev
            and x.comm is not None
            and dev in x.comm.group
        ]
        by_type = Counter(n.type for n in t.nodes)
        assert len(t.nodes) == len(tasks) + len(recvs) + len(mirrors)
        assert by_type[NodeType.COMM_RECV_NODE] == len(recvs) > 0
        assert (
            by_type[NodeType.COMM_SEND_NODE] == sum(x.kind is TaskKind.SENDRECV for x in tasks) > 0
        )
        assert by_type[NodeType.COMM_COLL_NODE] == sum(
            x.kind is TaskKind.COLLECTIVE for x in tasks
        ) + len(mirrors)
        comp = {TaskKind.COMPUTE, TaskKind.RECOMPUTE, TaskKind.OPTIMIZER, TaskKind.HOST}
        assert by_type[NodeType.COMP_NODE] == sum(x.kind in comp for x in tasks)
        nodes = {n.id: n for n in t.nodes}
        coll_bytes = sum(
            x.comm.message_bytes for x in tasks if x.kind is TaskKind.COLLECTIVE and x.comm
        ) + sum(x.comm.message_bytes for x in mirrors if x.comm)
        assert coll_bytes > 0
        assert sum(
            n.attr("comm_size") for n in t.nodes if n.type is NodeType.COMM_COLL_NODE
        ) == pytest.approx(coll_bytes, abs=len(tasks))
        for x in tasks:
            n = nodes[x.tid]
            assert n.duration_micros == round((tl.end_s[x.tid] - tl.start_s[x.tid]) * 1e6)
            assert n.start_time_micros == round(tl.start_s[x.tid] * 1e6)
            if x.kind is TaskKind.SENDRECV:
                assert n.attr("comm_size") == round(x.comm.message_bytes)
                assert n.attr("comm_dst") == ranks[x.comm.group[1]]
            if x.kind is TaskKind.COLLECTIVE and x.comm is not None:
                assert n.attr("pg_name") == "_".join(
                    str(r) for r in sorted(ranks[m] for m in x.comm.group)
                )


def test_dependency_order(exported) -> None:
    tl, ranks, traces = exported
    g = tl.graph
    for dev in g.devices:
        t = traces[ranks[dev]]
        seen: set[int] = set()
        for n in t.nodes:  # every dependency is an earlier node of the same file
            assert set(n.data_deps) | set(n.ctrl_deps) <= seen, n
            seen.add(n.id)
        nodes = {n.id: n for n in t.nodes}
        last_on_stream: dict[str, int] = {}
        for x in (x for x in g.tasks if x.device == dev):
            n = nodes[x.tid]
            local = {d for d in x.deps if g.tasks[d].device == dev}
            remote = {d for d in x.deps if g.tasks[d].device != dev}
            remote_sends = {d for d in remote if g.tasks[d].kind is TaskKind.SENDRECV}
            remote_colls = {d for d in remote if g.tasks[d].kind is TaskKind.COLLECTIVE}
            # a dependency on another rank's send is one on the local receive of the same tag;
            # one on another rank's collective, on this rank's own node of that collective
            recv_tags = {
                nodes[d].attr("comm_tag")
                for d in n.data_deps
                if d not in local and nodes[d].type is NodeType.COMM_RECV_NODE
            }
            mirrored = {
                d - 2 * len(g.tasks)
                for d in n.data_deps
                if d not in local and nodes[d].type is NodeType.COMM_COLL_NODE
            }
            assert set(n.data_deps) >= local and recv_tags == remote_sends
            if x.kind is not TaskKind.COLLECTIVE:  # a collective's own peers synchronise it
                assert mirrored == remote_colls
                assert remote == remote_sends | remote_colls
            prev = last_on_stream.get(x.stream)
            if prev is not None:  # program order of the stream is kept
                assert prev in n.ctrl_deps or prev in n.data_deps
            last_on_stream[x.stream] = x.tid


def test_protobuf_runtime_parses_the_files(exported) -> None:
    """The files parse with Google's protobuf runtime given et_def.proto's field numbers."""
    pytest.importorskip("google.protobuf", reason="protobuf not installed (test extra)")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="et_def.proto", package="ChakraProtoMsg", syntax="proto3"
    )

    def msg(name, fields):
        m = fdp.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("Int64List", [("values", 1, F.TYPE_INT64, rep, "")])
    msg("StringList", [("values", 1, F.TYPE_STRING, rep, "")])
    msg(
        "AttributeProto",
        [
            ("name", 1, F.TYPE_STRING, opt, ""),
            ("double_val", 3, F.TYPE_DOUBLE, opt, ""),
            ("int32_val", 7, F.TYPE_INT32, opt, ""),
            ("int64_val", 9, F.TYPE_INT64, opt, ""),
            ("int64_list", 10, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.Int64List"),
            ("uint64_val", 13, F.TYPE_UINT64, opt, ""),
            ("bool_val", 27, F.TYPE_BOOL, opt, ""),
            ("string_val", 29, F.TYPE_STRING, opt, ""),
        ],
    )
    msg(
        "GlobalMetadata",
        [
            ("version", 1, F.TYPE_STRING, opt, ""),
            ("attr", 2, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto"),
        ],
    )
    msg(
        "Node",
        [
            ("id", 1, F.TYPE_UINT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("type", 3, F.TYPE_INT32, opt, ""),
            ("ctrl_deps", 4, F.TYPE_UINT64, rep, ""),
            ("data_deps", 5, F.TYPE_UINT64, rep, ""),
            ("start_time_micros", 6, F.TYPE_UINT64, opt, ""),
            ("duration_micros", 7, F.TYPE_UINT64, opt, ""),
            ("attr", 10, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto"),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))
        for n in ("GlobalMetadata", "Node")
    }
    _tl, _ranks, traces = exported
    for rank, ours in traces.items():
        buf = open(ours.source, "rb").read()
        pos, msgs = 0, []
        while pos < len(buf):  # the length prefix: a base-128 varint
            n = shift = 0
            while True:
                b = buf[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            msgs.append(buf[pos : pos + n])
            pos += n
        meta = cls["GlobalMetadata"].FromString(msgs[0])
        assert meta.version == ET_VERSION
        assert {a.name: a.int64_val for a in meta.attr if a.name == "rank"} == {"rank": rank}
        theirs = [cls["Node"].FromString(m) for m in msgs[1:]]
        assert [
            (n.id, n.name, n.type, tuple(n.data_deps), tuple(n.ctrl_deps), n.duration_micros)
            for n in theirs
        ] == [
            (n.id, n.name, int(n.type), n.data_deps, n.ctrl_deps, n.duration_micros)
            for n in ours.nodes
        ]
        sizes = [a.int64_val for n in theirs for a in n.attr if a.name == "comm_size"]
        assert sizes == [a.value for n in ours.nodes for a in n.attrs if a.name == "comm_size"]


def test_cli_predict_chakra(tmp_path, capsys) -> None:
    out = tmp_path / "et"
    args = [
        "predict", "--system", "dgx-a100", "--model", "gpt",
        "--model-arg", "hidden=256", "--model-arg", "layers=4", "--model-arg", "heads=4",
        "--model-arg", "seq_len=128", "--model-arg", "vocab=1000",
        "--global-batch", "16", "--plan", "dp=2,tp=2,pp=2,microbatch=2", "--precision", "bf16",
        "--chakra", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"Chakra traces written to {out}: 2 file(s)" in text
    # the first GPU of each stage: rank (dp 0, pp s, tp 0) = 4 s in the order tp, dp, pp
    assert sorted(p.name for p in out.iterdir()) == ["perfmodel.0.et", "perfmodel.4.et"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [p.rsplit("/", 1)[1] for p in d["chakra_files"]] == ["perfmodel.0.et", "perfmodel.4.et"]


def test_cpu_merge_plan_memory_nodes_and_host_rank(tmp_path) -> None:
    """Keras' CPU merge: weights pulled from and gradients pushed to host memory become
    MEM_LOAD / MEM_STORE nodes of the parameter bytes; the host CPU gets the rank after the GPUs."""
    sc = Scenario(system="dgx1-v100", model="resnet18", batch_per_gpu=16, gpus=4,
                  software="keras-multi-gpu", fidelity="analytic")  # fmt: skip
    r = predict(sc, baseline=False)
    gpus = topology_of(sc).gpus
    paths = write_chakra(r.timeline, tmp_path, ranks={g: i for i, g in enumerate(gpus)})
    assert [p.name for p in paths] == ["perfmodel.0.et", f"perfmodel.{len(gpus)}.et"]
    nodes = read_trace(paths[0]).nodes
    mem = {n.type: n.attr("tensor_size") for n in nodes if n.type.name.startswith("MEM")}
    host = [t for t in r.timeline.graph.tasks if t.comm is not None and t.stream in ("h2d", "d2h")]
    assert mem == {
        NodeType.MEM_LOAD_NODE: round(
            next(t for t in host if t.stream == "h2d").comm.message_bytes
        ),
        NodeType.MEM_STORE_NODE: round(
            next(t for t in host if t.stream == "d2h").comm.message_bytes
        ),
    }
    cpu = read_trace(paths[1]).nodes
    assert [n.attr("is_cpu_op") for n in cpu] == [True]
