"""Max-min rates kept per flow network (``FlowNetwork.RATE_MEMO``, issue 27): the switch
against its reference.

``FlowNetwork._rates_of`` keeps each plain-Python rate computation's answer by the flows'
entries (flow count, each entry's flow, link id and multiplicity). It claims the same SimPy run
bit for bit: every completion time, byte counter and link counter equal with the memo off, with
a one-entry bound, and on a whole simulated step; the numpy path (many entries) keeps nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import simpy

import perfmodel.comm.flow as flow
from perfmodel.api import Scenario, resolve, topology_of
from perfmodel.comm import FlowNetwork, run_collective
from perfmodel.pipeline.lower import build_step
from perfmodel.sim.engine import FlowComm, simulate
from perfmodel.topology import load_system


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the rate computations that run (plain Python and numpy together)."""
    runs = [0]

    def count(f: Callable[..., Any]) -> Callable[..., Any]:
        def g(*a: Any) -> Any:
            runs[0] += 1
            return f(*a)

        return g

    monkeypatch.setattr(flow, "maxmin_rates_small", count(flow.maxmin_rates_small))
    monkeypatch.setattr(flow, "maxmin_rates", count(flow.maxmin_rates))
    return runs


def _run() -> tuple:
    """Ring collectives started again and again on two DGX H100 (the steps of a ring start
    the same channels), with contention and a lone send, all on one network: (completion
    times, bytes received, link bytes, flows completed, rate entries kept)."""
    topo = load_system("dgx-h100", nodes=2)
    g = tuple(topo.gpus)
    calls = [
        (0.0, "allreduce", 128e6, g, "ring"),
        (0.0, "allreduce", 64e6, g[:8], "ring"),
        (1e-4, "allgather", 32e6, g[::2], "ring"),
        (2e-4, "reducescatter", 16e6, g[8:], "ring"),
        (0.0, "sendrecv", 8e6, (g[2], g[10]), "p2p"),
        (3e-3, "allreduce", 128e6, g, "ring"),
        (1.0, "allreduce", 64e6, g[:8], "ring"),  # alone, then again: the same channels
        (2.0, "allreduce", 64e6, g[:8], "ring"),
    ]
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    ends: list[float] = []

    def later(t: float, op: str, nb: float, group: tuple[str, ...], algo: str):  # type: ignore[no-untyped-def]
        yield env.timeout(t)
        yield run_collective(net, op, nb, group, algo)
        ends.append(env.now)

    for c in calls:
        env.process(later(*c))
    while env.peek() < math.inf:
        env.step()
    return ends, dict(net.bytes_received), dict(net.link_bytes), net.flows_completed, net._rates


def test_kept_rates_are_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _counted(monkeypatch)
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", False)
    *ref, kept = _run()
    off = runs[0]
    assert kept == {}
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", True)
    runs[0] = 0
    *got, kept = _run()
    assert got[0] == ref[0]  # every completion time, bit for bit, in the same order
    assert got[1:] == ref[1:]
    assert 0 < len(kept) <= runs[0] < off  # the point of it: repeated inputs not recomputed


def test_the_numpy_path_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow, "SMALL_ENTRIES", 0)
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", False)
    *ref, _ = _run()
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", True)
    *got, kept = _run()
    assert got == ref
    assert kept == {}


def test_a_one_entry_bound_is_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", False)
    *ref, _ = _run()
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", True)
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO_SIZE", 1)
    *got, kept = _run()
    assert got == ref
    assert len(kept) == 1


def test_a_simulated_step_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensor-parallel rings, data-parallel reductions and pipeline sends of a small GPT on
    two DGX A100: every task's start and end equal with the memo on and off."""
    sc = Scenario(system="dgx-a100", nodes=2, model="gpt",
                  model_args={"hidden": 512, "layers": 4, "heads": 8, "seq_len": 512},
                  precision="bf16", optimizer="adam", software="megatron",
                  global_batch=32, tp=2, pp=2)  # fmt: skip
    step, _ = build_step(sc, resolve(sc))
    topo = topology_of(sc)
    runs = _counted(monkeypatch)

    def timeline(on: bool) -> tuple:
        monkeypatch.setattr(FlowNetwork, "RATE_MEMO", on)
        runs[0] = 0
        tl = simulate(step.graph, network_factory=lambda env: FlowComm(env, topo))
        return tl.makespan_s, tuple(tl.start_s), tuple(tl.end_s), runs[0]

    *a, n_on = timeline(True)
    *b, n_off = timeline(False)
    assert a == b and 0 < n_on < n_off  # the step goes through the memo (6 vs 20 at 58050d4)


def test_the_key_names_every_input_of_the_filling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs that differ in one part of the key only (a flow's multiplicity, the number of
    flows, which flow an entry belongs to, the link) get their own rates: kept answers equal
    the filling's with the memo off (each part left out of the key fails this test)."""
    from types import SimpleNamespace as F

    env = simpy.Environment()
    net = FlowNetwork(env, load_system("dgx1-v100"))
    net.transfer("gpu1", "gpu0", 1e6)
    env.run()
    a, b = 0, 1
    cases = [
        [([a], [1.0]), ([a], [1.0])],
        [([a], [1.0]), ([a], [3.0])],
        [([a, b], [1.0, 1.0]), ([a], [1.0])],
        [([a], [1.0]), ([a, b], [1.0, 1.0])],
        [([a], [1.0]), ([a], [1.0]), ([], [])],
        [([a], [1.0]), ([b], [1.0])],
        [([a, b], [1.0, 1.0]), ([], [])],
    ]
    got = [list(net._rates_of([F(ids=i, mults=m) for i, m in c])) for c in cases]
    monkeypatch.setattr(FlowNetwork, "RATE_MEMO", False)
    assert got == [list(net._rates_of([F(ids=i, mults=m) for i, m in c])) for c in cases]
