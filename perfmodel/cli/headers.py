"""The first line of every answer about a job: what it is (model, where, software preset,
precision, optimizer) with the defaults it took marked one way (:func:`job_settings`), for
``predict`` (:func:`predict_header`) and the comparisons: the plan search, the hardware what-if
and the systems search (:func:`job_header`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from perfmodel.cli._common import attention_kind
from perfmodel.scenario import JOB_SETTINGS, job_defaults, setting_words, unstated_defaults


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
    (issue 28, item 6): :func:`perfmodel.scenario.setting_words`, the words the API's
    ``defaults`` states them in too. ``software_text`` replaces the preset's words (a
    calibrated CPU's).

    >>> job_settings("megatron", "bf16", "sgd", frozenset({"precision"}))
    ['megatron (default preset; --software to choose)', 'bf16', 'sgd (default)']
    """
    values = dict(zip(JOB_SETTINGS, (software, precision, optimizer), strict=True))
    words = [setting_words(k, v, given is None or k in given) for k, v in values.items()]
    if software_text is not None:
        words[JOB_SETTINGS.index("software")] = software_text
    return words


def cli_defaults(defaults: list[str], sc: Any) -> list[str]:
    """A report's ``defaults`` (the API's words) as ``perfmodel predict --json`` states them:
    the software preset's chooser named as the flag, ``--software``
    (:func:`perfmodel.scenario.setting_words`, rev29 item 3)."""
    swap = dict(zip(unstated_defaults(sc), unstated_defaults(sc, face="cli"), strict=True))
    return [swap.get(d, d) for d in defaults]


def below_header(report: Any, sc: Any) -> Any:
    """``report`` with the ``defaults`` the job header above it states left out (the software
    preset, precision and optimizer the scenario ``sc`` took by default,
    :func:`perfmodel.scenario.job_defaults`): ``predict``'s text names each default once, in
    the header (its ``--json`` keeps them all: there is no header)."""
    from dataclasses import replace

    said = job_defaults(sc)
    if not said.intersection(report.defaults):
        return report
    return replace(report, defaults=tuple(d for d in report.defaults if d not in said))


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


def job_header(
    args: argparse.Namespace,
    where: str,
    tail: str,
    rows: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> str:
    """``MODEL on WHERE, SOFTWARE, PRECISION, OPTIMIZER; TAIL``: what a comparison is about,
    naming every default it took (the software preset: the framework whose plans run, issue 28,
    item 6; precision and optimizer, marked "(default)"; predict's words,
    :func:`job_settings`). One header for the plan search, the hardware
    what-if and the systems search. ``rows``: the what-if's ``(label, overrides)`` options; a
    setting a row states otherwise is named after the job's (``fp32 (default; bf16 on
    dgx-h100:precision=bf16)``)."""
    from perfmodel.api import Scenario

    keys = JOB_SETTINGS
    values = [str(getattr(args, k) or getattr(Scenario, k)) for k in keys]
    settings = job_settings(*values, frozenset(k for k in keys if getattr(args, k)))
    for i, key in enumerate(keys):  # a what-if row's own setting (dgx-h100:precision=bf16)
        own = [
            f"{o[key]} on {label}" for label, o in rows if str(o.get(key, values[i])) != values[i]
        ]
        if own:
            text = settings[i]
            settings[i] = (
                f"{text[:-1]}; {'; '.join(own)})"
                if text.endswith(")")
                else f"{text} ({'; '.join(own)})"
            )
    return f"{args.model} on {where}, {', '.join(settings)}; {tail}"


def hardware_fields(sc: Any, num_gpus: int) -> dict[str, Any]:
    """Where a prediction's ``num_gpus`` GPUs run (user22 item 4; ``predict --json``'s
    ``hardware``): the GPU model, the GPUs used on the fullest node and the nodes used (the
    first ``num_gpus`` of the topology's GPUs: they fill one node before the next,
    :func:`perfmodel.pipeline.evaluate.evaluate_step`), the nodes asked for, the intra-node
    link (the GPU's fastest link: bandwidth x count) and the inter-node fabric
    (:class:`~perfmodel.topology.model.FabricSpec`: network, topology, NICs per node and the
    fat tree's oversubscription; ``None`` on a system without one)."""
    from perfmodel.api import topology_of

    topo = topology_of(sc)
    used = topo.servers_used(num_gpus)
    first = topo.gpus[0]
    links = [d for _, _, d in topo.graph.edges(first, data=True) if "tech" in d]
    fastest = max(links, key=lambda d: d["bandwidth_Bps"] * d.get("count", 1), default=None)
    fab = topo.fabric
    return {
        "gpu": topo.gpu_spec().name,
        "gpus_used": num_gpus,
        "gpus_per_node_used": max(used.values(), default=0),
        "nodes_used": len(used),
        "nodes_asked": topo.num_nodes,
        "gpus_per_node": topo.gpus_per_node,
        "intra_node": None if fastest is None else str(fastest["tech"]),
        "fabric": None if fab is None else fab.described(),
    }


def hardware_line(hw: dict[str, Any]) -> str:
    """``predict``'s second line from :func:`hardware_fields`: ``hardware  H100-SXM5-80GB, 8
    GPUs/node x 2 nodes, intra-node nvswitch-v3, fabric ib-ndr rail (8 NIC(s)/node)``, stating a
    last node used only in part, a link one GPU does not use, an oversubscribed fat tree
    (``2:1 oversubscribed``) and the nodes asked for but not used."""
    nodes, per = hw["nodes_used"], hw["gpus_per_node_used"]
    text = f"hardware        {hw['gpu']}, {per} GPU(s)/node x {nodes} node(s)"
    if per * nodes != hw["gpus_used"]:
        text += f" ({hw['gpus_used']} GPUs: the last node {hw['gpus_used'] - per * (nodes - 1)})"
    if hw["intra_node"]:
        text += f", intra-node {hw['intra_node']}"
        if hw["gpus_used"] == 1:
            text += " unused (one GPU)"
    fab = hw["fabric"]
    if fab is not None:
        text += f", fabric {fab['network']} {fab['topology']} ({fab['nics_per_node']} NIC(s)/node"
        over = fab.get("oversubscription", 1.0)
        text += f", {over:g}:1 oversubscribed)" if over != 1.0 else ")"
        if nodes == 1:
            text += " unused (one node)"
    if nodes < hw["nodes_asked"]:
        verb = "is" if nodes == 1 else "are"
        text += (
            f"; {nodes} of the {hw['nodes_asked']} nodes asked for {verb} used (the GPUs fill "
            "one node before the next)"
        )
    return text
