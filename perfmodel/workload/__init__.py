"""perfmodel.workload: per-layer costs (FLOP, bytes, parameters, activations) and the model zoo.

>>> from perfmodel.workload import build_model
>>> build_model("resnet50", batch_size=1).total_params
25557032
"""

from perfmodel.workload.layers import (
    CommPoint,
    ExpertRole,
    GemmShape,
    KernelClass,
    LayerCost,
    LayerKind,
    Workload,
)
from perfmodel.workload.zoo import ModelInfo, build_model, get_model_info, list_models

__all__ = [
    "CommPoint",
    "ExpertRole",
    "GemmShape",
    "KernelClass",
    "LayerCost",
    "LayerKind",
    "ModelInfo",
    "Workload",
    "build_model",
    "get_model_info",
    "list_models",
]
