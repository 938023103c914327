"""Flow-level simulation: fair sharing, contention, agreement with the closed form, conservation."""

from __future__ import annotations

import pytest
import simpy
from comm_topos import star, two_level
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.comm import CommCostModel, FlowNetwork, run_collective
from perfmodel.comm.links import DirectedLinks
from perfmodel.errors import ConfigError
from perfmodel.units import GB, GiB


def test_two_flows_share_a_link_fairly():
    topo = star(3, 10 * GB)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    done = {}
    for src in ("gpu1", "gpu2"):
        ev = net.transfer(src, "gpu0", 1e9)
        ev.callbacks.append(lambda _e, s=src: done.__setitem__(s, env.now))
    env.run()
    # both cross sw->gpu0 (10 GB/s): 5 GB/s each, 0.2 s
    assert done == {"gpu1": pytest.approx(0.2), "gpu2": pytest.approx(0.2)}


def test_late_arrival_recomputes_rates():
    topo = star(3, 10 * GB)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    first = net.transfer("gpu1", "gpu0", 1e9)
    t_first = {}
    first.callbacks.append(lambda _e: t_first.setdefault("t", env.now))

    def later():
        yield env.timeout(0.05)  # 0.5 GB sent alone, then 0.5 GB at half rate -> 0.05 + 0.1
        yield net.transfer("gpu2", "gpu0", 1e9)

    env.process(later())
    env.run()
    assert t_first["t"] == pytest.approx(0.15)
    assert env.now == pytest.approx(0.2)  # second: 0.5 GB at 5 GB/s, then 0.5 GB alone at 10 GB/s


@pytest.mark.parametrize("size", [1 << 20, 256 << 20])
def test_uncontended_ring_agrees_with_closed_form(dgx1, dgx_a100_2, size):
    for topo in (dgx1, dgx_a100_2):
        a = CommCostModel(topo).collective("allreduce", size, topo.gpus, "ring")
        s = CommCostModel(topo, fidelity="simulated").collective(
            "allreduce", size, topo.gpus, "ring"
        )
        assert s.time_s == pytest.approx(a.time_s, rel=0.03), topo.name


@pytest.mark.parametrize(
    ("op", "algo"),
    [("allgather", "ring"), ("reducescatter", "ring"), ("alltoall", "direct"), ("allreduce", "ps")],
)
def test_uncontended_other_algorithms_agree(dgx1, op, algo):
    a = CommCostModel(dgx1).collective(op, 64 << 20, dgx1.gpus, algo)
    s = CommCostModel(dgx1, fidelity="simulated").collective(op, 64 << 20, dgx1.gpus, algo)
    assert s.time_s == pytest.approx(a.time_s, rel=0.03)


@pytest.mark.parametrize("size", [0, -1, float("inf"), "lots"])
def test_replay_refuses_the_sizes_the_closed_form_refuses(dgx1, size):
    """The flow replay checks a message size with the closed form's rule (one check:
    ``comm.analytic.check_message_bytes``): a positive finite number, else one ConfigError."""
    with pytest.raises(ConfigError, match="message size") as closed:
        CommCostModel(dgx1).collective("allreduce", size, dgx1.gpus)
    with pytest.raises(ConfigError, match="message size") as replay:
        run_collective(FlowNetwork(simpy.Environment(), dgx1), "allreduce", size, dgx1.gpus)
    assert str(replay.value) == str(closed.value)


def test_replay_reads_numeric_text_as_the_closed_form_does(dgx1):
    """The one check converts as well as refuses: numeric text is its number in both."""

    def replayed(size):
        env = simpy.Environment()
        run_collective(FlowNetwork(env, dgx1), "allreduce", size, dgx1.gpus)
        env.run()
        return env.now

    closed = CommCostModel(dgx1).collective
    assert (
        closed("allreduce", "1e6", dgx1.gpus).time_s == closed("allreduce", 1e6, dgx1.gpus).time_s
    )
    assert replayed("1e6") == replayed(1e6) > 0.0


def _alone_and_together(topo, group, size, other):
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    run_collective(net, "allreduce", size, group, "ring")
    env.run()
    alone = env.now
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    p = run_collective(net, "allreduce", size, group, "ring")
    other(net)
    env.run(until=p)
    return alone, env.now


def test_two_collectives_at_once_slow_each_other(dgx_a100_2):
    g = dgx_a100_2.gpus
    alone, together = _alone_and_together(
        dgx_a100_2, g, 256 << 20, lambda net: run_collective(net, "allreduce", 256 << 20, g, "ring")
    )
    assert together > 1.8 * alone


def test_pipeline_send_across_the_nic_slows_the_data_parallel_allreduce(dgx_a100_2):
    g = dgx_a100_2.gpus

    def sends(net):
        for i in range(8):  # one big send per rail, as pipeline-parallel stages would do
            net.transfer(g[i], g[8 + i], 1 * GiB)

    alone, together = _alone_and_together(dgx_a100_2, g, 256 << 20, sends)
    assert together > 1.2 * alone
    # ... and the closed form, which knows nothing of the sends, stays at the uncontended time
    a = CommCostModel(dgx_a100_2).collective("allreduce", 256 << 20, g, "ring").time_s
    assert a == pytest.approx(alone, rel=0.03)


TOPOS = [star(4, 10 * GB, 1e-6), two_level(5 * GB, 2e-6)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topo_i=st.integers(0, 1),
    transfers=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1e3, 1e8), st.floats(0, 1e-3)),
        min_size=1,
        max_size=8,
    ),
)
def test_flows_never_beat_their_route_and_conserve_bytes(topo_i, transfers):
    topo = TOPOS[topo_i]
    links = DirectedLinks(topo)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    checks = []

    def start(src, dst, nbytes, delay):
        yield env.timeout(delay)
        t0 = env.now
        path = links.route(src, dst) if src != dst else (src,)
        yield net.transfer(src, dst, nbytes)
        bound = (
            0.0
            if len(path) == 1
            else nbytes / links.path_bandwidth(path) + links.path_latency(path)
        )
        checks.append((env.now - t0, bound))

    for a, b, nbytes, delay in transfers:
        env.process(start(f"gpu{a}", f"gpu{b}", nbytes, delay))
    env.run()
    for took, bound in checks:
        assert took >= bound * (1 - 1e-9)
    assert sum(net.bytes_sent.values()) == pytest.approx(sum(net.bytes_received.values()))


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 4),
    size=st.integers(1 << 10, 1 << 26),
    op=st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast", "alltoall"]),
)
def test_simulated_collective_conserves_bytes_and_respects_lower_bound(n, size, op):
    topo = star(4, 10 * GB, 1e-6)
    group = topo.gpus[:n]
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    algo = "direct" if op == "alltoall" else "ring"
    run_collective(net, op, size, group, algo)
    env.run()
    assert sum(net.bytes_sent.values()) == pytest.approx(sum(net.bytes_received.values()))
    # every byte a rank must receive crosses its one 10 GB/s link
    from perfmodel.ops import CollectiveOp, bus_factor

    lower = size * bus_factor(CollectiveOp.parse(op), n) / (10 * GB)
    assert env.now >= lower * (1 - 1e-9)


def test_link_bytes_count_every_crossing_of_transfers_and_channel_flows():
    """``link_bytes`` (added up when read, issue 27): a transfer adds its bytes to each link of
    its route; a channel flow (``transfer_multi``) adds its bytes once per hop crossing a link,
    also when the same hops are sent again (their link ids are built once per network)."""
    topo = star(3, 10 * GB)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    hops = (("gpu0", "sw", "gpu1"), ("gpu1", "sw", "gpu0"))
    net.transfer("gpu1", "gpu0", 1e9)
    net.transfer_multi(hops, 2e9, [("gpu0", "gpu1", 2e9), ("gpu1", "gpu0", 2e9)])
    net.transfer_multi(hops, 3e9, [("gpu0", "gpu1", 3e9), ("gpu1", "gpu0", 3e9)])
    first = dict(net.link_bytes)
    assert first == {
        ("gpu1", "sw"): 1e9 + 2e9 + 3e9,
        ("sw", "gpu0"): 1e9 + 2e9 + 3e9,
        ("gpu0", "sw"): 2e9 + 3e9,
        ("sw", "gpu1"): 2e9 + 3e9,
    }
    env.run()
    assert dict(net.link_bytes) == first  # read twice: nothing added twice
    net.transfer("gpu2", "gpu0", 4e9)
    assert net.link_bytes[("gpu2", "sw")] == 4e9
    assert net.link_bytes[("sw", "gpu0")] == 1e9 + 2e9 + 3e9 + 4e9
