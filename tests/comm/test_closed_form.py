"""Golden values of the closed forms (hand arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest

from perfmodel.comm import closed_form as cf
from perfmodel.errors import ConfigError
from perfmodel.units import GiB, us


def test_ring_allreduce_1gib_8gpus_golden():
    # 2(n-1) alpha + 2 (n-1)/n m / bw = 14 x 5 us + 1.75 x 2^30 / 100e9 s
    expected = 14 * 5e-6 + 1.75 * 2**30 / 100e9
    assert cf.ring_allreduce_time(8, GiB, 5 * us, 100e9) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.018860, abs=1e-6)


def test_reduction_term_adds_gamma():
    base = cf.ring_allreduce_time(4, 1e9, 0.0, 10e9)
    with_gamma = cf.ring_allreduce_time(4, 1e9, 0.0, 10e9, reduce_Bps=100e9)
    assert with_gamma - base == pytest.approx(0.75 * 1e9 / 100e9)


def test_halving_doubling_matches_ring_bandwidth_term_with_fewer_steps():
    ring = cf.ring_allreduce_time(16, 1e9, 1e-6, 10e9)
    hd = cf.halving_doubling_allreduce_time(16, 1e9, 1e-6, 10e9)
    assert ring - hd == pytest.approx((30 - 8) * 1e-6)


def test_non_power_of_two_halving_doubling_pays_fold():
    assert cf.halving_doubling_allreduce_time(6, 1e6, 0, 1e9) > cf.halving_doubling_allreduce_time(
        4, 1e6, 0, 1e9
    )


def test_hierarchical_equals_flat_ring_when_one_node():
    assert cf.hierarchical_allreduce_time(8, 1, 1e9, 1e-6, 10e9, 1e-5, 1e9) == pytest.approx(
        cf.ring_reducescatter_time(8, 1e9, 1e-6, 10e9) + cf.ring_allgather_time(8, 1e9, 1e-6, 10e9)
    )


def test_parameter_server_sharding_divides_server_load():
    one = cf.parameter_server_time(8, 1e8, 0.0, 10e9, 10e9, servers=1)
    four = cf.parameter_server_time(8, 1e8, 0.0, 10e9, 10e9, servers=4)
    assert one == pytest.approx(2 * 8 * 1e8 / 10e9)
    assert four == pytest.approx(2 * 2 * 1e8 / 10e9)


def test_host_average_golden():
    # gather 2 x 1 MB at 10 GB/s, average 3 MB at 30 GB/s, scatter 2 MB at 10 GB/s
    assert cf.host_average_time(2, 1e6, 0.0, 10e9, 30e9) == pytest.approx(0.2e-3 + 0.1e-3 + 0.2e-3)


def test_pipelined_chain_tends_to_message_over_bandwidth():
    t = cf.pipelined_chain_time(8, 1e9, 1e-6, 10e9)
    assert 0.1 < t < 0.1 * 1.05


def test_single_rank_is_free():
    assert cf.ring_allreduce_time(1, 1e6, 1e-6, 1e9) == 0.0
    assert cf.direct_alltoall_time(1, 1e6, 1e-6, 1e9) == 0.0


@pytest.mark.parametrize(
    "args",
    [
        (0, 1e6, 0.0, 1e9),
        (4, 0, 0.0, 1e9),
        (4, -5, 0.0, 1e9),
        (4, 1e6, -1.0, 1e9),
        (4, 1e6, 0.0, 0.0),
    ],
)
def test_bad_input_raises(args):
    with pytest.raises(ConfigError):
        cf.ring_allreduce_time(*args)


def test_torus_needs_positive_shape():
    with pytest.raises(ConfigError):
        cf.torus2d_allreduce_time(0, 2, 1e6, 0, 1e9, 0, 1e9)
    assert math.isfinite(cf.torus2d_allreduce_time(2, 4, 1e6, 0, 1e9, 0, 1e9))


def test_torus_2x4_rings_golden():
    # rows 2, cols 4: reduce-scatter and all-gather on the 4-rank row rings at the row links
    # (3 x 1 us + 3/4 x 8 MB / 1 GB/s = 6.003 ms each), then all-reduce of the 2 MB shard on
    # the 2-rank column rings at the column links (2 x 5 us + 2 x 1/2 x 2 MB / 100 MB/s =
    # 20.01 ms): 32.016 ms, and the hierarchy with each row ring as a node
    t = cf.torus2d_allreduce_time(2, 4, 8e6, 1 * us, 1e9, 5 * us, 1e8)
    assert t == pytest.approx(32.016e-3, rel=1e-12)
    assert t == cf.hierarchical_allreduce_time(4, 2, 8e6, 1 * us, 1e9, 5 * us, 1e8)
