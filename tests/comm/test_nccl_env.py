"""NCCL's environment in NCCL's choice (comm/nccl_env.py): parsing by NCCL's rules, the choice
without what it switches off, the ``--nccl-env`` flag and the scenario key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.cli import main
from perfmodel.comm import CommCostModel
from perfmodel.comm.nccl_env import (
    DEFAULT_ENV,
    NCCL_ALGORITHMS,
    NcclEnv,
    nccl_env_of,
    with_nccl_env,
)
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import load_system

AR = CollectiveOp.ALLREDUCE


# ---------------------------------------------------------------------------------- parsing


def test_parse_list_follows_nccl_parselist() -> None:
    """NVIDIA/nccl v2.26.2-1 src/graph/tuning.cc parseList, the examples of its comment."""
    env = NcclEnv.parse([("NCCL_ALGO", "ring,collnetdirect;allreduce:tree,collnetdirect")])
    # every collective: ring and CollNet Direct only; all-reduce: tree and CollNet Direct only
    assert env.allows(CollectiveOp.ALLGATHER, Algorithm.RING)
    assert not env.allows(CollectiveOp.ALLGATHER, Algorithm.TREE)
    assert not env.allows(AR, Algorithm.RING) and env.allows(AR, Algorithm.TREE)
    assert env.allows(AR, Algorithm.COLLNET) and not env.allows(AR, Algorithm.NVLS)
    env = NcclEnv.parse([("NCCL_PROTO", "^LL128;allreduce:LL128")])
    assert not env.allows(CollectiveOp.ALLGATHER, Algorithm.RING, Protocol.LL128)
    assert env.allows(CollectiveOp.ALLGATHER, Algorithm.RING, Protocol.LL)
    assert env.allows(AR, Algorithm.RING, Protocol.LL128)
    assert not env.allows(AR, Algorithm.RING, Protocol.SIMPLE)
    # names without case, as strcasecmp
    assert NcclEnv.parse([("NCCL_ALGO", "^nvls,NVLSTree")]).off(AR) == (
        Algorithm.NVLS,
        Algorithm.NVLS_TREE,
    )


def test_parse_list_splits_as_strtok_r() -> None:
    """Review mend 7: NCCL's parseList splits with strtok_r (v2.26.2-1 and v2.29.7-1
    src/graph/tuning.cc): empty pieces are skipped, so ``LL,,Simple``, ``ring;`` and an empty
    value are accepted (the empty value changes nothing), and ``^`` alone enables all."""
    two = NcclEnv.parse([("NCCL_PROTO", "LL,,Simple")])
    assert two.disabled_protocols == NcclEnv.parse([("NCCL_PROTO", "LL,Simple")]).disabled_protocols
    assert not two.allows(AR, Algorithm.RING, Protocol.LL128)
    assert NcclEnv.parse([("NCCL_ALGO", "ring;")]).off(AR) == NcclEnv.parse(
        [("NCCL_ALGO", "ring")]
    ).off(AR)
    assert NcclEnv.parse([("NCCL_ALGO", "")]).default
    assert NcclEnv.parse([("NCCL_ALGO", "^")]).default
    assert NcclEnv.parse([("NCCL_ALGO", "allreduce:tree;;broadcast:ring")]).off(AR) == (
        NcclEnv.parse([("NCCL_ALGO", "allreduce:tree")]).off(AR)
    )
    # NCCL_NVLS_ENABLE empty is its default (ncclLoadParam reads only a non-empty value)
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", "")]).default


def test_switches_and_other_variables() -> None:
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", "1"), ("NCCL_DEBUG", "INFO")]).default
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", "2")]).default
    assert NcclEnv.parse([("NCCL_COLLNET_ENABLE", "1")]).default
    assert NcclEnv.parse([("NCCL_COLLNET_ENABLE", " 0")]).off(AR) == (Algorithm.COLLNET,)
    off = NcclEnv.parse([("NCCL_NVLS_ENABLE", "0"), ("NCCL_COLLNET_ENABLE", "0")]).off(AR)
    assert set(off) == {Algorithm.NVLS, Algorithm.NVLS_TREE, Algorithm.COLLNET}
    # a later value of a name wins, as in a shell
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", "0"), ("NCCL_NVLS_ENABLE", "1")]).default
    # CollNet Chain has no model: naming it alone leaves every modelled algorithm off
    assert set(NcclEnv.parse([("NCCL_ALGO", "CollNetChain")]).off(AR)) == {
        a for a in NCCL_ALGORITHMS.values() if a
    }


def test_nvls_enable_reads_integers_as_strtoll() -> None:
    """NCCL reads NCCL_NVLS_ENABLE with ``strtoll(str, NULL, 0)`` (src/misc/param.cc): a
    leading 0 is octal, so ``010`` is 8 (on) and ``00`` / ``0x0`` are 0 (off); Python's
    ``int(text, 0)`` rejected ``010``."""
    nvls = {Algorithm.NVLS, Algorithm.NVLS_TREE}
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", "010")]).default
    assert NcclEnv.parse([("NCCL_NVLS_ENABLE", " 1 ")]).default
    for zero in ("00", "0x0", "-0", " 0"):
        assert set(NcclEnv.parse([("NCCL_NVLS_ENABLE", zero)]).off(AR)) == nvls, zero
    for bad in ("off", "1abc", "08", "1_0"):
        with pytest.raises(ConfigError, match="NCCL_NVLS_ENABLE"):
            NcclEnv.parse([("NCCL_NVLS_ENABLE", bad)])


@pytest.mark.parametrize(
    ("pair", "named"),
    [
        (("NCCL_ALGO", "Bogus"), "bogus"),
        (("NCCL_ALGO", "ring;tree"), "must name a collective"),
        (("NCCL_ALGO", "alltoall:ring"), "alltoall"),
        (("NCCL_PROTO", "LL256"), "ll256"),
        (("NCCL_ALGO", "ring, tree"), "' tree'"),  # NCCL strips nothing
        (("NCCL_ALGO", "^^ring"), "'\\^ring'"),  # one caret; the second is in the name
        (("NCCL_ALGO", ";ring"), "must name a collective"),  # the first token starts the value
        (("NCCL_COLLNET_ENABLE", "1 "), "2.29"),
        (("NCCL_NVLS_ENABLE", "off"), "NCCL_NVLS_ENABLE"),
        (("NCCL_COLLNET_ENABLE", "2"), "NCCL_COLLNET_ENABLE"),
        (("NVLS_ENABLE", "0"), "not an NCCL_"),
        (("NCCL_ALGO", 0), "expected text"),
    ],
)
def test_bad_values_name_the_variable_and_where(pair, named) -> None:
    with pytest.raises(ConfigError, match=named) as info:
        NcclEnv.parse([pair], where="here.toml")
    assert info.value.where == "here.toml" and "here.toml" in str(info.value)


# -------------------------------------------------------------------------------- the choice


def test_nvls_off_on_a_gb200_rack_picks_ring_or_tree() -> None:
    """Golden: a GB200 NVL72 rack's 8 GiB all-reduce is NVLS by NCCL's choice; with
    ``NCCL_NVLS_ENABLE=0`` (CoreWeave's job) it is the faster of ring and tree, the same
    candidate, bit for bit, as the forced ring's."""
    t = load_system("gb200-nvl72")
    m = 8 * 2**30
    auto = CommCostModel(t).collective(AR, m, t.gpus)
    assert auto.algorithm is Algorithm.NVLS
    off = with_nccl_env(t, NcclEnv.parse([("NCCL_NVLS_ENABLE", "0")]))
    model = CommCostModel(off)
    r = model.collective(AR, m, off.gpus)
    ring, tree = (model.collective(AR, m, off.gpus, a) for a in ("ring", "tree"))
    assert r.algorithm in (Algorithm.RING, Algorithm.TREE)
    assert r.time_s == min(ring.time_s, tree.time_s)
    assert r.algorithm is Algorithm.RING and r.protocol is Protocol.SIMPLE
    # NVLS forced stays available: the caller's algorithm wins over NCCL_ALGO / NVLS_ENABLE
    assert model.collective(AR, m, off.gpus, "nvls").time_s == auto.time_s


def test_protocol_off_on_a_dgx_h100() -> None:
    """``NCCL_PROTO=^LL128`` (a common workaround): no LL128 in the choice, forced or not."""
    t = load_system("dgx-h100", nodes=2)
    env = with_nccl_env(t, NcclEnv.parse([("NCCL_PROTO", "^LL128")]))
    base, model = CommCostModel(t), CommCostModel(env)
    sizes = [2**k for k in range(10, 31, 2)]
    assert any(base.collective(AR, s, t.gpus, "ring").protocol is Protocol.LL128 for s in sizes)
    for s in sizes:
        for algo in ("auto", "ring", "tree"):
            r = model.collective(AR, s, env.gpus, algo)
            assert r.protocol is not Protocol.LL128
            # switching a choice off never makes the call faster
            assert r.time_s >= base.collective(AR, s, t.gpus, algo).time_s


def test_nccl_proto_stating_ll128_skips_the_enable_rule() -> None:
    """NCCL_PROTO set for a collective makes LL128 explicit (``protoEnable`` 1 or 0, not the
    default 2 its enable rule decides; v2.26.2-1 src/graph/tuning.cc): a Hopper stating NCCL
    2.14 has no LL128 by the rule (Hopper joined in 2.15), but ``NCCL_PROTO=^LL`` turns it on
    (and LL off); ``NCCL_PROTO=Simple`` leaves Simple alone."""
    from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

    t = with_nccl_p2p_rule(load_system("dgx-h100"), NcclRelease.parse("2.14"))
    sizes = [2**k for k in range(12, 31, 2)]
    env = NcclEnv.parse([("NCCL_PROTO", "^LL")])
    assert env.ll128_stated == frozenset(
        {AR, CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER, CollectiveOp.BROADCAST,
         CollectiveOp.REDUCE}
    )  # fmt: skip
    base, on = CommCostModel(t), CommCostModel(with_nccl_env(t, env))
    assert Protocol.LL128 not in {base.collective(AR, s, t.gpus).protocol for s in sizes}
    got = {on.collective(AR, s, t.gpus).protocol for s in sizes}
    assert Protocol.LL128 in got and Protocol.LL not in got
    simple = CommCostModel(with_nccl_env(t, NcclEnv.parse([("NCCL_PROTO", "Simple")])))
    assert {simple.collective(AR, s, t.gpus).protocol for s in sizes} == {Protocol.SIMPLE}
    assert not NcclEnv.parse([("NCCL_PROTO", "^LL128")]).ll128_stated


def test_nothing_left_is_an_error_naming_the_variable() -> None:
    t = load_system("dgx-h100")
    env = with_nccl_env(t, NcclEnv.parse([("NCCL_ALGO", "Tree")], where="--nccl-env"))
    with pytest.raises(ConfigError, match="NCCL_ALGO=Tree") as info:
        CommCostModel(env).collective(CollectiveOp.ALLGATHER, 2**20, env.gpus)
    assert info.value.where == "--nccl-env"
    # no effect on what NCCL_ALGO does not name (all-to-all, send/recv)
    CommCostModel(env).collective(CollectiveOp.ALLTOALL, 2**20, env.gpus)


def test_with_nccl_env_records_and_removes() -> None:
    t = load_system("dgx-h100")
    env = NcclEnv.parse([("NCCL_NVLS_ENABLE", "0")])
    assert nccl_env_of(t) is DEFAULT_ENV
    on = with_nccl_env(t, env)
    assert nccl_env_of(on) == env and nccl_env_of(t) is DEFAULT_ENV
    assert nccl_env_of(with_nccl_env(on, DEFAULT_ENV)) is DEFAULT_ENV


_ALGO_NAMES = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"]


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.sampled_from(_ALGO_NAMES), min_size=1, max_size=4),
    caret=st.booleans(),
    size=st.sampled_from([2**10, 2**20, 2**26, 2**30]),
)
def test_auto_is_the_fastest_left(names, caret, size) -> None:
    """Property: under any ``NCCL_ALGO`` the choice is the fastest of what is left, never an
    algorithm it switches off, and never faster than NCCL's unrestricted choice."""
    t = _H100X2
    env = NcclEnv.parse([("NCCL_ALGO", ("^" if caret else "") + ",".join(names))])
    model = CommCostModel(with_nccl_env(t, env))
    free = _H100X2_MODEL.collective(AR, size, t.gpus)
    try:
        r = model.collective(AR, size, t.gpus)
    except ConfigError as exc:
        assert "NCCL_ALGO" in str(exc)
        return
    assert env.allows(AR, r.algorithm, r.protocol)
    assert r.time_s >= free.time_s
    if env.allows(AR, free.algorithm, free.protocol):
        assert r.time_s == free.time_s


_H100X2 = load_system("dgx-h100", nodes=2)
_H100X2_MODEL = CommCostModel(_H100X2)


# ------------------------------------------------------------------------------ the flag


@settings(max_examples=40, deadline=None)
@given(
    value=st.text(max_size=12),
    name=st.sampled_from(["NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "X"]),
)
def test_flag_fuzz_is_a_result_or_exit_2(value, name) -> None:
    """Any ``--nccl-env`` value: a table (exit 0) or a typed error (exit 2), never a crash."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            rc = main(["comm", "--system", "dgx-h100", "--sizes", "1M",
                       "--nccl-env", f"{name}={value}"])  # fmt: skip
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code
    assert rc in (0, 2)


def test_flag_changes_the_table(capsys) -> None:
    args = ["comm", "--system", "dgx-h100", "--sizes", "1G"]
    assert main(args) == 0
    assert "nvls/Simple" in capsys.readouterr().out
    assert main([*args, "--nccl-env", "NCCL_ALGO=^NVLS"]) == 0
    out = capsys.readouterr().out
    assert "nvls" not in out.split("(GB/s)")[-1] and "ring/" in out
    assert main([*args, "--nccl-env", "NCCL_NVLS_ENABLE=maybe"]) == 2
    err = capsys.readouterr().err
    assert "--nccl-env" in err and "NCCL_NVLS_ENABLE" in err


# -------------------------------------------------------------------------- the scenario


def test_scenario_key_round_trips_through_toml(tmp_path) -> None:
    from perfmodel._io import load_toml
    from perfmodel.pipeline.inputs import topology_of
    from perfmodel.scenario import Scenario

    f = tmp_path / "s.toml"
    f.write_text(
        'system = "dgx-h100"\nmodel = "gpt2_xl"\nbatch_per_gpu = 1\n'
        'nccl_env = { NCCL_NVLS_ENABLE = "0", NCCL_PROTO = "^LL128" }\n'
    )
    sc = Scenario.from_dict(load_toml(f), where=str(f))
    assert sc.nccl_env.variables == (("NCCL_NVLS_ENABLE", "0"), ("NCCL_PROTO", "^LL128"))
    assert sc.nccl_env.where == f"{f}: nccl_env"  # parsed once, naming the file
    again = Scenario.from_dict(sc.to_dict())
    assert again == sc and again.content_hash() == sc.content_hash()
    env = nccl_env_of(topology_of(sc))
    assert env is sc.nccl_env and Algorithm.NVLS in env.off(AR)
    assert nccl_env_of(topology_of(Scenario.from_dict({**sc.to_dict(), "nccl_env": {}}))).default
    f.write_text('system = "dgx-h100"\nnccl_env = { NCCL_ALGO = "Rings" }\n')
    with pytest.raises(ConfigError, match="nccl_env") as info:
        Scenario.from_dict(load_toml(f), where=str(f))
    assert str(f) in str(info.value) and "rings" in str(info.value)


def test_predict_flag_prices_the_step(capsys) -> None:
    """``predict --nccl-env``: an 8-GPU data-parallel step whose all-reduce NCCL would run as
    NVLS is slower with NVLS off."""
    import json

    args = ["predict", "--system", "dgx-h100", "--model", "gpt2_xl", "--batch-per-gpu", "1",
            "--precision", "bf16", "--fidelity", "analytic", "--json"]  # fmt: skip
    assert main(args) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*args, "--nccl-env", "NCCL_NVLS_ENABLE=0"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["exposed_comm_time_s"] > free["exposed_comm_time_s"]
    assert off["iteration_time_s"] > free["iteration_time_s"]
    assert off["scenario"]["nccl_env"] == [["NCCL_NVLS_ENABLE", "0"]]


def test_b200_scale_rows_state_nccl_algo_as_their_environment() -> None:
    """The B200 nccl-tests rows of scale.jsonl ran with ``NCCL_ALGO=Ring``: their scenario's
    environment leaves NCCL the ring alone (its protocols), the algorithm left at ``auto``."""
    import json
    from pathlib import Path

    from perfmodel.accuracy_scale import map_comm_row

    path = Path(__file__).resolve().parents[2] / "validation" / "scale.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    mapped = [map_comm_row(r) for r in rows if str(r["id"]).startswith("together-b200")]
    assert mapped
    for sc in mapped:
        assert sc.algorithm == "auto" and sc.env.variables == (("NCCL_ALGO", "Ring"),)
        assert set(sc.env.off(sc.op)) >= {Algorithm.TREE, Algorithm.NVLS, Algorithm.PAT}
        assert sc.env.allows(sc.op, Algorithm.RING)


def test_scenario_built_in_code_parses_its_environment() -> None:
    """Review mend 4: ``Scenario(nccl_env=("NCCL_ALGO=Ring",))`` built in code (no
    ``from_dict``) is parsed when built (was an untyped ValueError in the pipeline); a bad one
    is a ConfigError naming ``scenario.nccl_env``; none stated stays ``()``."""
    from perfmodel.pipeline.inputs import topology_of
    from perfmodel.scenario import Scenario

    sc = Scenario(system="dgx-h100", nccl_env=("NCCL_ALGO=Ring",))
    assert sc.nccl_env == NcclEnv.parse([("NCCL_ALGO", "Ring")])
    assert sc.nccl_env.where == "scenario.nccl_env"
    assert nccl_env_of(topology_of(sc)).off(AR) == NcclEnv.parse([("NCCL_ALGO", "Ring")]).off(AR)
    assert Scenario(system="dgx-h100", nccl_env={"NCCL_ALGO": "Ring"}) == sc
    assert Scenario(system="dgx-h100", nccl_env=sc.nccl_env).nccl_env is sc.nccl_env
    assert Scenario(nccl_env=[]).nccl_env == () == Scenario(nccl_env={}).nccl_env
    with pytest.raises(ConfigError, match=r"scenario\.nccl_env") as info:
        Scenario(nccl_env=("NCCL_ALGO=Rings",))
    assert info.value.where == "scenario.nccl_env"


def test_predict_names_the_flag_the_user_typed(capsys) -> None:
    """Review mend 5: ``--nccl-env`` is parsed once at the edge and carried with its origin, so
    an error found deep in the pipeline names ``--nccl-env``, not ``scenario.nccl_env``; the
    same environment from two origins are two topology cache entries."""
    from perfmodel.pipeline.inputs import topology_of
    from perfmodel.scenario import Scenario

    args = ["predict", "--system", "dgx-h100", "--nodes", "2", "--model", "gpt2_xl",
            "--batch-per-gpu", "1", "--software", "fsdp", "--zero", "3",
            "--fidelity", "analytic", "--nccl-env", "NCCL_ALGO=Tree"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--nccl-env: NCCL_ALGO=Tree leaves NCCL no algorithm" in err
    assert "scenario.nccl_env" not in err
    flag = Scenario(system="dgx-h100", nccl_env=NcclEnv.parse([("NCCL_ALGO", "Tree")], where="x"))
    code = Scenario(system="dgx-h100", nccl_env=[("NCCL_ALGO", "Tree")])
    assert flag == code and flag.content_hash() == code.content_hash()
    assert nccl_env_of(topology_of(flag)).where == "x"
    assert nccl_env_of(topology_of(code)).where == "scenario.nccl_env"


def test_public_protocols_follow_the_environment() -> None:
    """Review nit 13: ``CommCostModel.protocols`` drops what ``NCCL_PROTO`` switches off (was:
    NCCL's enable rule alone, whatever the environment)."""
    t = load_system("dgx-h100")

    def protos(value: str, op=None) -> set:
        m = CommCostModel(with_nccl_env(t, NcclEnv.parse([("NCCL_PROTO", value)])))
        return set(m.protocols(m.group_info(t.gpus), op))

    m = CommCostModel(t)
    every = set(m.protocols(m.group_info(t.gpus)))
    assert Protocol.LL in every
    assert protos("^LL") == every - {Protocol.LL}
    assert protos("allreduce:^LL", AR) == every - {Protocol.LL}
    assert protos("allreduce:^LL") == every == protos("allreduce:^LL", CollectiveOp.ALLGATHER)


def test_forced_algorithm_without_protocols_names_nccl_proto() -> None:
    """Review nit 15: a forced algorithm whose protocols NCCL_PROTO switched off says so,
    naming the variable and where it was stated (was: "tree is not available" alone)."""
    t = load_system("dgx-h100")
    env = NcclEnv.parse([("NCCL_PROTO", "allreduce:^LL,LL128,Simple")], where="--nccl-env")
    m = CommCostModel(with_nccl_env(t, env))
    with pytest.raises(ConfigError, match="tree is not available") as info:
        m.collective(AR, 8e6, t.gpus, "tree")
    assert "--nccl-env: NCCL_PROTO=allreduce:^LL,LL128,Simple switches off" in str(info.value)
    assert m.collective(CollectiveOp.ALLGATHER, 8e6, t.gpus, "ring").time_s > 0
