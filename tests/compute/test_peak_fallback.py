"""ComputeParams.peak and GPUSpec.peak apply one fallback rule (no silent FP32 for BF16 on Pascal)."""

from __future__ import annotations

import pytest

from perfmodel.compute import ComputeParams
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.hardware.gpus import list_gpus


@pytest.mark.parametrize("gpu", [g.name for g in list_gpus()])
def test_same_rule_for_every_gpu_and_format(gpu: str) -> None:
    spec = get_gpu(gpu)
    params = ComputeParams.for_gpu(spec)
    for dtype in DType:
        try:
            want = spec.peak(dtype)
        except ConfigError:
            with pytest.raises(ConfigError, match=dtype.value):
                params.peak(dtype)
            continue
        assert params.peak(dtype) == pytest.approx(want), dtype


def test_the_rule() -> None:
    v100, p100, h100 = (get_gpu(n) for n in ("V100-SXM2-16GB", "P100-SXM2-16GB", "H100-SXM5-80GB"))
    assert v100.peak(DType.BF16) == v100.peak(DType.FP32)  # emulated on Volta
    assert v100.peak(DType.TF32) == v100.peak(DType.FP32)  # no TF32 units: FP32 math
    assert h100.peak(DType.BF16) > 10 * h100.peak(DType.FP32)
    for dtype in (DType.BF16, DType.FP8):
        with pytest.raises(ConfigError, match="P100"):
            ComputeParams.for_gpu(p100).peak(dtype)
