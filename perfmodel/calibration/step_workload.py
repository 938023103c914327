"""The zoo workload and optimizer of a measured training step (``step/*`` measurements).

Both the eager host fit (:mod:`perfmodel.calibration.host`) and the validation report
(:mod:`perfmodel.calibration.validate`) predict measured steps with the zoo model of the same
architecture; this module is what they share.
"""

from __future__ import annotations

from typing import Any

from perfmodel.calibration.measurement import Measurement

#: The measured step's optimizer (``params["optimizer"]``) -> the zoo's optimizer name.
OPTIMIZER_OF_STEP = {
    "sgd": "sgd",
    "sgd-momentum": "momentum",
    "adamw": "adam",
    "adamw-fused": "adam",
    "adam": "adam",
}


def step_workload(m: Measurement) -> tuple[Any, str]:
    """The zoo :class:`~perfmodel.workload.layers.Workload` and optimizer of a measured step.

    GPT-2 steps are built with ``flash_attention=True, dropout=False`` (the measured model uses
    ``scaled_dot_product_attention`` and no dropout); the MLP with its ``widths``.
    """
    from perfmodel.workload import build_model

    p = m.params
    model = str(p["model"])
    args: dict[str, Any] = {}
    if model == "mlp":
        args["widths"] = [int(w) for w in p["widths"]]
    elif model == "gpt2":
        for k in ("seq_len", "layers", "hidden", "heads", "vocab"):
            if k in p:
                args[k] = int(p[k])
        args["flash_attention"] = True
        args["dropout"] = False
    elif model.startswith("resnet"):
        if "image_size" in p:
            args["image_size"] = int(p["image_size"])
    workload = build_model(
        model, batch_size=int(p["batch_size"]), precision=str(p["precision"]), **args
    )
    return workload, OPTIMIZER_OF_STEP.get(str(p.get("optimizer", "sgd")), "sgd")
