"""The host side of a training step: the input pipeline that feeds the GPUs.

:mod:`perfmodel.host.input_pipeline` models reading, decoding and augmenting samples on the CPU
(or on the GPU with DALI), the loader's parallelism per framework, the host-to-device copies and
their overlap with the GPU step; :func:`~perfmodel.host.measure.measure_input_costs` times
the per-sample costs on this machine (``perfmodel calibrate --device cpu --only input``).
"""

from perfmodel.host.input_pipeline import (
    DATASETS,
    FRAMEWORK_LOOPS,
    DatasetKind,
    InputPipeline,
    LoaderKind,
    check_single_node,
    input_pipeline,
)

__all__ = [
    "DATASETS",
    "FRAMEWORK_LOOPS",
    "DatasetKind",
    "InputPipeline",
    "LoaderKind",
    "check_single_node",
    "input_pipeline",
]
