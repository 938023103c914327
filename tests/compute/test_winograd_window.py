"""cuDNN's Winograd applies to 3x3 stride-1 undilated convolutions only (FP32, CUDA cores)."""

from dataclasses import replace

from perfmodel.compute import ComputeModel
from perfmodel.dtypes import Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model


def test_stride_two_3x3_gets_no_winograd():
    model = ComputeModel(get_gpu("V100-SXM2-16GB"))
    strided = next(
        layer
        for layer in build_model("resnet50", batch_size=64, precision="fp32").layers
        if layer.conv_window is not None and layer.conv_window[:4] == (3, 3, 2, 2)
    )
    as_stride_one = replace(strided, conv_window=(3, 3, 1, 1, 1, 1))
    t_strided = model.layer_time(strided, Precision.FP32).fwd_s
    t_one = model.layer_time(as_stride_one, Precision.FP32).fwd_s
    # same GEMM, same bytes: only the Winograd speed-up differs (compute-bound 3x3 layer)
    assert t_one < t_strided
    assert t_strided / t_one <= model.params.winograd_speedup + 1e-9


def test_one_by_one_conv_with_9k_input_channels_gets_no_winograd():
    """A 1x1 conv with C_in = 144 has k = 144 = 9 x 16, which the shape alone cannot tell from a
    3x3 conv over 16 channels (MobileNetV2, Inception-v3 have such layers): the window decides."""
    model = ComputeModel(get_gpu("V100-SXM2-16GB"))
    one = next(
        la
        for la in build_model("resnet50", batch_size=64, precision="fp32").layers
        if la.conv_window is not None and la.conv_window[:2] == (1, 1)
    )
    one = replace(one, gemm=replace(one.gemm, k=144))
    unknown = replace(one, conv_window=None)  # an imported layer: only the shape is known
    assert (
        model.layer_time(one, Precision.FP32).fwd_s
        > model.layer_time(unknown, Precision.FP32).fwd_s
    )
