"""The first line of every answer about a job: what it is (model, where, software preset,
precision, optimizer) with the defaults it took marked one way (:func:`job_settings`), for
``predict`` (:func:`predict_header`) and the comparisons: the plan search, the hardware what-if
and the systems search (:func:`job_header`)."""

from __future__ import annotations

import argparse
from typing import Any

from perfmodel.cli._common import attention_kind


def job_settings(
    software: str,
    precision: str,
    optimizer: str,
    given: frozenset[str] | None,
    *,
    software_text: str | None = None,
) -> list[str]:
    """The settings a job header names (software preset, precision, optimizer), each a
    default the user did not give (``given``: the scenario keys stated; ``None``: all stated)
    marked the one way ``predict``, the plan search, the what-if and the systems search say it:
    ``"(default)"``, and for the preset (the framework whose plans run) which flag chooses it
    (issue 28, item 6). ``software_text`` replaces the preset's words (a calibrated CPU's).

    >>> job_settings("megatron", "bf16", "sgd", frozenset({"precision"}))
    ['megatron (default preset; --software to choose)', 'bf16', 'sgd (default)']
    """

    def mark(key: str, text: str) -> str:
        if given is None or key in given:
            return text
        return f"{text} (default{' preset; --software to choose' if key == 'software' else ''})"

    return [
        software_text if software_text is not None else mark("software", software),
        mark("precision", precision),
        mark("optimizer", optimizer),
    ]


def _cpu_software(sc: Any) -> str:
    """What runs on a calibrated CPU: the library the profile was measured with (its
    ``provenance.backend``, e.g. NumPy), not a framework it never ran (issue 28, item 6)."""
    from perfmodel.calibration.profile import read_profile
    from perfmodel.errors import PerfModelError

    try:
        backend = str(read_profile(sc.calibration).provenance.get("backend") or "")
    except PerfModelError:
        backend = ""
    what = f"{backend} kernels as calibrated" if backend else "the kernels as calibrated"
    return f"CPU: {what} ({sc.software} preset for the rest)"


def predict_header(
    sc: Any, report: Any, *, curve: bool = False, given: frozenset[str] | None = None
) -> str:
    """First line of a prediction: model, system, software, precision, optimizer, batch, and
    the sequence length (sequence models) or the convolution memory format (CNNs). A curve
    names the batch key the scenario fixed (per GPU, or global) since the global batch changes
    along it. The software preset, precision and optimizer the scenario did not state
    (``given``: its keys; ``None``: all stated) are marked as the plan search's header marks
    them (:func:`job_settings`; audit15 item 6)."""
    from perfmodel.errors import PerfModelError
    from perfmodel.workload.zoo import get_model_info

    try:
        family = get_model_info(sc.model).family
    except PerfModelError:  # a workload of the user's own (workload_fn)
        family = ""
    cpu = getattr(report, "device", "GPU") == "CPU"

    parts = [
        f"{sc.model} on {sc.system} x{sc.nodes} node(s)",
        *job_settings(
            str(sc.software),
            str(sc.precision),
            str(sc.optimizer),
            given,
            software_text=_cpu_software(sc) if cpu else None,
        ),
        (
            f"batch {sc.batch_per_gpu} per GPU"
            if curve and sc.batch_per_gpu is not None
            else f"global batch {report.samples_per_step}"
        ),
    ]
    if report.is_sequence_model:
        parts.append(f"sequence length {report.tokens_per_sample}")
        kind = attention_kind(sc.model, dict(sc.model_args))
        if kind:  # which attention kernel (its memory): gpt and gpt2 differ (issue 28)
            parts.append(kind.split(" (", 1)[0])
    if family == "cnn":
        parts.append(f"{report.plan.get('memory_format', 'nchw')} convolutions")
    return ", ".join(parts)


def job_header(args: argparse.Namespace, where: str, tail: str) -> str:
    """``MODEL on WHERE, SOFTWARE, PRECISION, OPTIMIZER; TAIL``: what a comparison is about,
    naming every default it took (the software preset: the framework whose plans run, issue 28,
    item 6; precision and optimizer, marked "(default)"; predict's words,
    :func:`job_settings`). One header for the plan search, the hardware
    what-if and the systems search."""
    from perfmodel.api import Scenario

    keys = ("software", "precision", "optimizer")
    settings = job_settings(
        *(str(getattr(args, k) or getattr(Scenario, k)) for k in keys),
        frozenset(k for k in keys if getattr(args, k)),
    )
    return f"{args.model} on {where}, {', '.join(settings)}; {tail}"
