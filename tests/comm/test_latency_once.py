"""Latency counted once: NCCL's per-step latency is the measured hop cost (issue 12).

Hand values from NCCL 2.7/2.8 ``src/graph/tuning.cc`` (``baseLat``, ``hwLat``):
- single DGX A100, 8 B all-reduce, ring/LL: 3.6 + 2 x 7 x 0.47 = 10.18 us;
- 16 DGX A100, 8 B all-reduce, tree/LL: 4.4 + 2 x (7 x 0.52 x 1.8 + log2(16) x 5.0) = 57.50 us,
  measured 58.23 us (coreweave/nccl-tests README log, 128 GPUs, row coreweave-a100-128g-8B).
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm import params as P
from perfmodel.topology import load_system
from perfmodel.units import us


@pytest.fixture(scope="module")
def a100x16():
    return load_system("dgx-a100", nodes=16)


def test_single_dgx_a100_8_bytes_is_nccls_formula():
    topo = load_system("dgx-a100")
    r = CommCostModel(topo).collective("allreduce", 8, topo.gpus)
    assert r.time_s == pytest.approx((3.6 + 14 * 0.47) * us, rel=1e-4)


@pytest.mark.parametrize("fidelity", ["analytic", "simulated"])
def test_16_dgx_a100_8_bytes_near_the_measured_58_us(a100x16, fidelity):
    r = CommCostModel(a100x16, fidelity=fidelity).collective("allreduce", 8, a100x16.gpus)
    if fidelity == "analytic":
        assert r.time_s == pytest.approx((4.4 + 2 * (7 * 0.52 * 1.8 + 4 * 5.0)) * us, rel=1e-4)
    assert r.time_s == pytest.approx(58.23 * us, rel=0.20)


def test_alltoall_pays_nccls_base_latency():
    topo = load_system("dgx-h100")
    m = CommCostModel(topo)
    tiny = m.collective("alltoall", 8 * 8, topo.gpus)
    # base 8.4 us + one NVLink Simple step 3.4 us + 56 x 1 B at NVLink speed (negligible)
    assert tiny.time_s == pytest.approx(P.NCCL_DIRECT_BASE_LATENCY_S + 3.4 * us, rel=1e-3)
    sim = CommCostModel(topo, fidelity="simulated").collective("alltoall", 8 * 8, topo.gpus)
    assert sim.time_s == pytest.approx(tiny.time_s, rel=1e-3)
