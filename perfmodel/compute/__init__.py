"""perfmodel.compute: per-layer compute time on one GPU (roofline + tile/wave efficiency).

>>> from perfmodel.hardware import get_gpu
>>> from perfmodel.workload import build_model
>>> cm = ComputeModel(get_gpu("V100-SXM2-16GB"))
>>> fwd_s, bwd_s = cm.workload_time(build_model("resnet50", batch_size=64))
>>> 0 < fwd_s < bwd_s
True
"""

from perfmodel.compute.gemm import GemmEfficiency, gemm_efficiency
from perfmodel.compute.model import Bound, ComputeModel, LayerTime
from perfmodel.compute.params import ALIGNMENT_ELEMENTS, HOST_DISPATCH_S, ComputeParams, Tile

__all__ = [
    "ALIGNMENT_ELEMENTS",
    "HOST_DISPATCH_S",
    "Bound",
    "ComputeModel",
    "ComputeParams",
    "GemmEfficiency",
    "LayerTime",
    "Tile",
    "gemm_efficiency",
]
