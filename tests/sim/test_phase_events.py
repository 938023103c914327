"""Fewer SimPy events for the same step (issue 27 item 1): the switches against their references.

``perfmodel.comm.replay.PHASE_ONE_PROCESS`` runs a phase of concurrent transfers (an expert
all-to-all, a point-to-point exchange, ...) as one process instead of a process per transfer;
``FlowNetwork.SHARED_DELIVERY`` lets flows finishing together, due at one instant, share one
delivery timeout (a ring's channels). Both claim the same SimPy run bit for bit: here every
start and end time, byte counter and link counter must be equal with either switch off, on
collectives alone, under contention, across transports, and on a whole MoE step.
"""

from __future__ import annotations

import math

import pytest
import simpy

import perfmodel.comm.replay as replay
from perfmodel.api import Scenario, resolve, topology_of
from perfmodel.comm import FlowNetwork, run_collective
from perfmodel.pipeline.lower import build_step
from perfmodel.sim.engine import FlowComm, simulate
from perfmodel.topology import load_system

#: A two-layer MoE GPT (8 experts, top-2) small enough for a SimPy step in a test.
SMALL_MOE = {"hidden": 256, "layers": 2, "heads": 4, "kv_heads": 2, "ffn_hidden": 512,
             "experts": 8, "top_k": 2, "seq_len": 512, "vocab": 1024}  # fmt: skip


def _switch(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(replay, "PHASE_ONE_PROCESS", on)
    monkeypatch.setattr(FlowNetwork, "SHARED_DELIVERY", on)


def _run(calls: list[tuple[float, str, float, tuple[str, ...], str]]) -> tuple:
    """Collectives ``(start s, op, bytes, group, algorithm)`` on two DGX H100, all on one
    network: (completion times, events processed, bytes received, link bytes, flows)."""
    topo = load_system("dgx-h100", nodes=2)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    ends: list[float] = []

    def later(t: float, op: str, nb: float, group: tuple[str, ...], algo: str):
        yield env.timeout(t)
        yield run_collective(net, op, nb, group, algo, coarse=True)
        ends.append(env.now)

    for c in calls:
        env.process(later(*c))
    events = 0
    while env.peek() < math.inf:
        env.step()
        events += 1
    return ends, events, dict(net.bytes_received), dict(net.link_bytes), net.flows_completed


def _calls() -> list[tuple[float, str, float, tuple[str, ...], str]]:
    g = tuple(load_system("dgx-h100", nodes=2).gpus)
    return [
        (0.0, "alltoall", 64e6, g[:4], "auto"),  # inside a server (NVLink)
        (0.0, "alltoall", 64e6, g[4:8], "auto"),  # its sibling, at the same instant
        (1e-4, "alltoall", 32e6, (g[0], g[1], g[8], g[9]), "auto"),  # NVLink and NICs
        (2e-4, "allreduce", 128e6, g, "ring"),  # a ring over both servers, contending
        (3e-4, "reducescatter", 16e6, g[::2], "direct"),
        (0.0, "sendrecv", 8e6, (g[2], g[10]), "p2p"),
    ]


def test_phase_in_one_process_and_shared_delivery_are_the_same_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _switch(monkeypatch, False)
    ends, events, received, links, flows = _run(_calls())
    _switch(monkeypatch, True)
    ends2, events2, received2, links2, flows2 = _run(_calls())
    assert ends2 == ends  # bit for bit, in the same order
    assert (received2, links2, flows2) == (received, links, flows)
    assert events2 < 0.5 * events  # the point of it: 492 -> 209 events here


@pytest.mark.parametrize("on", [True, False])
def test_each_switch_alone_is_the_same_run(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    _switch(monkeypatch, False)
    ref = _run(_calls())
    monkeypatch.setattr(replay, "PHASE_ONE_PROCESS", on)
    monkeypatch.setattr(FlowNetwork, "SHARED_DELIVERY", not on)
    got = _run(_calls())
    assert got[0] == ref[0] and got[2:] == ref[2:]


def test_a_moe_step_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Expert all-to-alls per micro-batch and layer beside tensor-parallel rings and pipeline
    sends: every task's start and end equal with the switches on and off."""
    sc = Scenario(system="dgx-h100", nodes=2, model="moe", model_args=SMALL_MOE,
                  precision="bf16", optimizer="adam", software="megatron-core",
                  global_batch=16, tp=2, pp=2, ep=4)  # fmt: skip
    step, _ = build_step(sc, resolve(sc))
    topo = topology_of(sc)

    def timeline(on: bool) -> tuple:
        _switch(monkeypatch, on)
        tl = simulate(step.graph, network_factory=lambda env: FlowComm(env, topo))
        return tl.makespan_s, tuple(tl.start_s), tuple(tl.end_s)

    off = timeline(False)
    assert timeline(True) == off


def _deliveries() -> tuple[list[tuple[int, float]], int]:
    """Four equal transfers over four disjoint NVLink paths of a DGX H100, all finishing at one
    instant, with latencies 1 ms, 2 ms, 1 ms, 0: (delivery order with times, events)."""
    topo = load_system("dgx-h100")
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    g = topo.gpus
    got: list[tuple[int, float]] = []
    for i, lat in enumerate((1e-3, 2e-3, 1e-3, 0.0)):
        ev = net.transfer(g[2 * i], g[2 * i + 1], 1e6, latency_s=lat)
        ev.callbacks.append(lambda _e, i=i: got.append((i, env.now)))
    events = 0
    while env.peek() < math.inf:
        env.step()
        events += 1
    return got, events


def test_shared_delivery_keeps_each_flows_instant_and_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _switch(monkeypatch, False)
    ref, events = _deliveries()
    _switch(monkeypatch, True)
    got, events2 = _deliveries()
    assert got == ref
    assert [i for i, _ in got] == [3, 0, 2, 1]
    assert events2 == events - 1  # the two 1 ms deliveries share a timeout
