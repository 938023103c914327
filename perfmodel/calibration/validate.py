"""The validation report: predicted vs measured, per layer, per step, per collective.

Every comparison is a :class:`ValidationRow` with the signed error
``error = predicted / measured - 1`` (``+0.10``: the model is 10% slow, i.e. pessimistic).
Rows are grouped by category (``step``, ``step_gpu_busy`` (the same step prediction against the
traced kernel time alone, idle gaps removed), ``layer``, ``layer_kind``, ``gemm``, ``conv``,
``attention``, ``collective``)
and by *variant* (which parameters predicted them: ``datasheet``, ``gemm+bw``, ``full`` ...);
each group reports the count, the median signed error, the median absolute error and the worst
row. :func:`write_report` writes ``report.md``, ``report.json``, ``scatter.png`` (predicted vs
measured, log axes) and ``errors.png`` (histogram of signed errors), each atomically.

Training-step measurements are predicted with the zoo model of the same architecture
(:func:`step_workload`) and :class:`perfmodel.compute.ComputeModel`: forward + backward of every
layer + the optimizer step. They never feed a fit (see :func:`perfmodel.calibration.fit_compute_params`),
so their errors are out-of-sample.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfmodel._io import atomic_write, parse_json, read_text, write_json_atomic
from perfmodel._record import FlatRecord, record_dict
from perfmodel.calibration.kineto import MODULE_KIND
from perfmodel.calibration.measurement import BenchKind, Measurement
from perfmodel.calibration.step_workload import step_workload
from perfmodel.errors import CalibrationError
from perfmodel.units import TFLOPS


@dataclass(frozen=True)
class ValidationRow:
    """One prediction next to one measurement (seconds)."""

    category: str
    name: str
    variant: str
    measured_s: float
    predicted_s: float
    source: str = ""
    notes: str = ""

    @property
    def error(self) -> float:
        """Signed relative error ``predicted / measured - 1``."""
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """The fields with :attr:`error` after ``predicted_s`` (its JSON form)."""
        return record_dict(self, _ROW_KEYS)


_ROW_KEYS = ("category", "name", "variant", "measured_s", "predicted_s", "error", "source", "notes")


@dataclass(frozen=True)
class GroupSummary(FlatRecord):
    """Error statistics of one (category, variant) group (its JSON form:
    :class:`~perfmodel._record.FlatRecord`)."""

    category: str
    variant: str
    n: int
    median_error: float
    median_abs_error: float
    worst_error: float
    worst_name: str


@dataclass(frozen=True)
class ValidationReport:
    """All rows plus per-group summaries and what could not be compared."""

    rows: tuple[ValidationRow, ...]
    title: str = "perfmodel validation"
    context: Mapping[str, Any] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()

    def summaries(self) -> list[GroupSummary]:
        groups: dict[tuple[str, str], list[ValidationRow]] = defaultdict(list)
        for r in self.rows:
            groups[(r.category, r.variant)].append(r)
        out = []
        for (cat, var), rows in groups.items():
            errs = [r.error for r in rows]
            worst = max(rows, key=lambda r: abs(r.error))
            out.append(
                GroupSummary(
                    category=cat,
                    variant=var,
                    n=len(rows),
                    median_error=statistics.median(errs),
                    median_abs_error=statistics.median(abs(e) for e in errs),
                    worst_error=worst.error,
                    worst_name=worst.name,
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "context": dict(self.context),
            "summary": [s.to_dict() for s in self.summaries()],
            "rows": [r.to_dict() for r in self.rows],
            "skipped": list(self.skipped),
        }


# ---------------------------------------------------------------------------------------------
# training steps
# ---------------------------------------------------------------------------------------------


def predict_step(
    workload: Any, optimizer: str, gpu: Any, params: Any | None
) -> tuple[float, float, float, list[Any]]:
    """(forward s, backward s, optimizer s, per-layer LayerTimes) of one training step.

    The host issues an eager step's kernels asynchronously: when their issue time
    (``sum(LayerTime.host_s)``) exceeds the GPU forward + backward, the GPU waits and the excess
    is charged to the backward, so ``fwd + bwd + opt`` is
    :meth:`~perfmodel.compute.ComputeModel.step_time`.
    """
    from perfmodel.compute import ComputeModel

    cm = ComputeModel(gpu, params)
    times = cm.layer_times(workload)
    fwd = sum(t.fwd_s for t in times)
    bwd = sum(t.bwd_s for t in times)
    host = sum(t.host_s for t in times)
    bwd += max(0.0, host - fwd - bwd)
    opt = cm.optimizer_time(workload.params, optimizer, workload.precision)
    return fwd, bwd, opt, times


# torch module path -> zoo layer name, for the models perfmodel's step runner measures
_NAME_RULES: tuple[tuple[str, str], ...] = (
    # ResNet-50 (torchvision) -> zoo
    (r"^conv1$", "conv1.conv"),
    (r"^bn1$", "conv1.bn"),
    (r"^relu$", "conv1.relu"),
    (r"^(layer\d\.\d+)\.conv(\d)$", r"\1.\2.conv"),
    (r"^(layer\d\.\d+)\.bn(\d)$", r"\1.\2.bn"),
    (r"^(layer\d\.\d+)\.downsample\.0$", r"\1.downsample"),
    (r"^(layer\d\.\d+)\.downsample\.1$", r"\1.downsample.bn"),
    # GPT (perfmodel.calibration.steps) -> zoo
    (r"^wte$", "embed.tokens"),
    (r"^wpe$", "embed.positions"),
    (r"^blocks\.(\d+)\.attn$", r"layer\1.attention"),
    (r"^blocks\.(\d+)\.proj$", r"layer\1.attn_out"),
    (r"^blocks\.(\d+)\.fc$", r"layer\1.fc1"),
    (r"^blocks\.(\d+)\.fc_proj$", r"layer\1.fc2"),
    (r"^blocks\.(\d+)\.add1$", r"layer\1.residual1"),
    (r"^blocks\.(\d+)\.add2$", r"layer\1.residual2"),
    (r"^blocks\.(\d+)\.(ln1|ln2|qkv|gelu)$", r"layer\1.\2"),
    (r"^ln_f$", "final_ln"),
    (r"^fc$", "fc1"),  # torchvision ResNet classifier
    # NumPy MLP (fc0, fc1, ...) -> zoo (fc1, fc2, ...)
    (r"^fc(\d+)$", "fc+1:\\1"),
)


def zoo_layer_name(torch_name: str) -> str | None:
    """Map a measured module path to the zoo's layer name (``None`` when no rule applies).

    >>> zoo_layer_name("layer2.0.downsample.1"), zoo_layer_name("blocks.3.fc_proj"), zoo_layer_name("fc0")
    ('layer2.0.downsample.bn', 'layer3.fc2', 'fc1')
    """
    for pat, rep in _NAME_RULES:
        if re.match(pat, torch_name):
            out = re.sub(pat, rep, torch_name)
            if out.startswith("fc+1:"):
                return f"fc{int(out[5:]) + 1}"
            return out
    return torch_name


def step_rows(
    steps: Sequence[Measurement],
    layers: Sequence[Measurement],
    gpu: Any,
    variants: Mapping[str, Any],
    *,
    source: str = "",
) -> tuple[list[ValidationRow], list[str]]:
    """Rows for whole steps, per-layer-kind and per-layer times, for every parameter variant.

    Per layer, the measured forward is compared with the predicted forward and the measured
    backward with the predicted input- plus weight-gradient time. Measured layers with no zoo
    counterpart (and zoo layers never measured) are listed in the skipped notes.
    """
    rows: list[ValidationRow] = []
    skipped: list[str] = []
    for st in steps:
        try:
            workload, optimizer = step_workload(st)
        except Exception as exc:  # a model the zoo cannot build is reported, not fatal
            skipped.append(f"{st.key}: cannot build the zoo model ({exc})")
            continue
        label = _step_label(st)
        mine = [m for m in layers if _same_step(m, st)]
        measured_kind: dict[tuple[str, str], float] = defaultdict(float)
        measured_layer: dict[tuple[str, str], float] = defaultdict(float)
        for m in mine:
            phase = str(m.params["phase"])
            if phase not in ("fwd", "bwd"):
                if phase == "optimizer":
                    measured_kind[("optimizer", "step")] += m.time_s
                continue
            module = str(m.params.get("module", ""))
            kind = MODULE_KIND.get(module, "linear" if module == "Linear" else "other")
            if str(m.params["layer"]) == "loss":
                kind = "loss"
            measured_kind[(kind, phase)] += m.time_s
            name = zoo_layer_name(str(m.params["layer"])) or str(m.params["layer"])
            measured_layer[(name, phase)] += m.time_s
        for variant, params in variants.items():
            params = _step_layout(params, gpu, st)
            fwd, bwd, opt, times = predict_step(workload, optimizer, gpu, params)
            rows.append(
                ValidationRow(
                    "step",
                    label,
                    variant,
                    st.time_s,
                    fwd + bwd + opt,
                    source,
                    notes=f"{workload.name}",
                )
            )
            busy = st.params.get("traced_device_busy_s")
            if busy:
                # the same prediction against the GPU's kernel time alone (idle gaps removed)
                rows.append(
                    ValidationRow(
                        "step_gpu_busy", label, variant, float(busy), fwd + bwd + opt, source
                    )
                )
            pred_kind: dict[tuple[str, str], float] = defaultdict(float)
            pred_layer: dict[tuple[str, str], float] = {}
            for la, t in zip(workload.layers, times):
                pred_kind[(la.kind.value, "fwd")] += t.fwd_s
                pred_kind[(la.kind.value, "bwd")] += t.bwd_s
                name = _measured_group(la.name)
                pred_layer[(name, "fwd")] = pred_layer.get((name, "fwd"), 0.0) + t.fwd_s
                pred_layer[(name, "bwd")] = pred_layer.get((name, "bwd"), 0.0) + t.bwd_s
            pred_kind[("optimizer", "step")] = opt
            # a row per (group, phase) measured and predicted, both non-zero
            for category, measured, predicted in (
                ("layer_kind", measured_kind, pred_kind),
                ("layer", measured_layer, pred_layer),
            ):
                rows += [
                    ValidationRow(
                        category,
                        f"{label} {key[0]} {key[1]}",
                        variant,
                        meas,
                        predicted[key],
                        source,
                    )
                    for key, meas in measured.items()
                    if key in predicted and meas > 0 and predicted[key] > 0
                ]
        unmatched = sorted(
            {k[0] for k in measured_layer} - {_measured_group(la.name) for la in workload.layers}
        )
        if unmatched:
            skipped.append(
                f"{label}: measured layers without a zoo counterpart: {', '.join(unmatched[:12])}"
            )
    return rows, skipped


def _measured_group(zoo_name: str) -> str:
    """Zoo layers that one measured module covers: torchvision's Bottleneck calls its single
    ``relu`` module three times, so ``layerX.Y.{1,2}.relu`` and ``layerX.Y.relu`` are one group."""
    return re.sub(r"^(layer\d\.\d+)\.\d\.relu$", r"\1.relu", zoo_name)


def _step_layout(params: Any, gpu: Any, step: Measurement) -> Any:
    """``params`` with ``conv_layout`` set from the step's measured ``memory_format``
    (``nchw`` steps pay cuDNN's layout transposes; channels_last steps are the default)."""
    fmt = step.params.get("memory_format")
    if fmt is None:
        return params
    from perfmodel.compute.params import ComputeParams, parse_memory_format

    layout = parse_memory_format(fmt, where=f"{step.key} memory_format")
    base = params if params is not None else ComputeParams.for_gpu(gpu)
    return replace(base, conv_layout=layout) if base.conv_layout != layout else params


def _same_step(layer: Measurement, step: Measurement) -> bool:
    """A per-layer measurement belongs to a step when its key is the step's key plus
    ``/<layer>/<phase>`` (not a longer step key that merely starts the same way)."""
    if step.key.startswith("step/") and layer.key.startswith("step_layer/"):
        head = "step_layer/" + step.key[len("step/") :] + "/"
        return layer.key.startswith(head) and layer.key[len(head) :].count("/") == 1
    return all(
        layer.params.get(k) == step.params.get(k) for k in ("model", "batch_size", "precision")
    )


def _step_label(st: Measurement) -> str:
    p = st.params
    label = f"{p['model']} b{p['batch_size']} {p['precision']}"
    extra = [f"{k}={p[k]}" for k in ("seq_len", "vocab") if k in p]
    if p.get("memory_format") == "nchw":
        extra.append("nchw")
    return label + (f" ({', '.join(extra)})" if extra else "")


# ---------------------------------------------------------------------------------------------
# microbenchmarks and collectives
# ---------------------------------------------------------------------------------------------


def microbenchmark_rows(
    measurements: Sequence[Measurement], gpu: Any, variants: Mapping[str, Any], *, source: str = ""
) -> list[ValidationRow]:
    """GEMM, convolution and attention microbenchmarks predicted one by one (category = kind)."""
    from perfmodel.calibration.fit import measurement_layer, predicted_time
    from perfmodel.compute import ComputeModel

    rows = []
    for variant, params in variants.items():
        if params is not None and getattr(params, "host_dispatch_s", 0.0):
            # microbenchmarks time GPU work (CUDA-graph replay / events around many launches):
            # the eager host floor of training steps does not apply to them
            params = replace(params, host_dispatch_s=0.0)
        cm = ComputeModel(gpu, params)
        for m in measurements:
            if m.kind not in (BenchKind.GEMM, BenchKind.CONV, BenchKind.ATTENTION):
                continue
            lp = measurement_layer(m)
            if lp is None:
                continue
            try:
                pred = predicted_time(cm, lp[0], lp[1], str(m.params.get("phase", "fwd")))
            except Exception:  # dtype unsupported by the datasheet spec
                continue
            rows.append(ValidationRow(m.kind.value, m.key, variant, m.time_s, pred, source))
    return rows


def fitted_collective_rows(
    profile: Any, measurements: Sequence[Measurement], *, source: str = ""
) -> list[ValidationRow]:
    """Collectives predicted by the profile's own fitted ring model (category ``collective``)."""
    from perfmodel.calibration.nccl import predict_ring

    rows = []
    for m in measurements:
        if m.kind is not BenchKind.COLLECTIVE:
            continue
        fit = profile.fits.get(f"link.{m.params.get('link_class')}")
        if fit is None:
            continue
        pred = predict_ring(m, fit.values["alpha_s"], fit.values["bandwidth_Bps"])
        name = f"{m.params['op']} n={m.params['ranks']} {int(m.params['nbytes'])} B"
        rows.append(ValidationRow("collective", name, "fitted ring", m.time_s, pred, source))
    return rows


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.1f}%"


def to_markdown(report: ValidationReport, *, images: bool = True) -> str:
    """The report as Markdown: summary table, then every row of the small categories."""
    lines = [f"# {report.title}", ""]
    for k, v in report.context.items():
        lines.append(f"- **{k}**: {v}")
    lines += [
        "",
        "Signed error = predicted / measured - 1 (positive: the model predicts slower than measured).",
        "",
        "## Summary",
        "",
        "| category | variant | n | median error | median abs error | worst |",
        "|---|---|---:|---:|---:|---|",
    ]
    for s in sorted(report.summaries(), key=lambda s: (s.category, s.variant)):
        lines.append(
            f"| {s.category} | {s.variant} | {s.n} | {_pct(s.median_error)} | "
            f"{s.median_abs_error * 100:.1f}% | {_pct(s.worst_error)} ({s.worst_name}) |"
        )
    for cat in ("step", "step_gpu_busy", "layer_kind", "collective"):
        rows = [r for r in report.rows if r.category == cat]
        if not rows:
            continue
        lines += [
            "",
            f"## {cat}",
            "",
            "| name | variant | measured | predicted | error |",
            "|---|---|---:|---:|---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r.name} | {r.variant} | {r.measured_s * 1e3:.3f} ms | {r.predicted_s * 1e3:.3f} ms | {_pct(r.error)} |"
            )
    if images:
        lines += ["", "![predicted vs measured](scatter.png)", "", "![error histogram](errors.png)"]
    if report.skipped:
        lines += ["", "## Not compared", ""] + [f"- {s}" for s in report.skipped]
    return "\n".join(lines) + "\n"


def _plots(report: ValidationReport, outdir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    variants = sorted({r.variant for r in report.rows})
    markers = {
        "step": "o",
        "layer": ".",
        "layer_kind": "s",
        "gemm": "x",
        "conv": "+",
        "attention": "*",
        "published_gemm": "D",
        "collective": "^",
    }
    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    lo, hi = math.inf, 0.0
    for i, var in enumerate(variants):
        for cat, mk in markers.items():
            rows = [r for r in report.rows if r.variant == var and r.category == cat]
            if not rows:
                continue
            xs = [r.measured_s for r in rows]
            ys = [r.predicted_s for r in rows]
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
            ax.scatter(
                xs,
                ys,
                s=14 if cat != "step" else 50,
                marker=mk,
                color=f"C{i}",
                alpha=0.7,
                label=f"{cat} ({var})",
            )
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.25, hi / 1.25], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("predicted time (s)")
    ax.set_title(f"{report.title}\n(solid: exact, dotted: ±25%)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    written.append(_save_fig(fig, outdir / "scatter.png"))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, var in enumerate(variants):
        errs = [100 * r.error for r in report.rows if r.variant == var]
        if errs:
            ax.hist(errs, bins=30, alpha=0.5, color=f"C{i}", label=f"{var} (n={len(errs)})")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("signed error, % (predicted / measured - 1)")
    ax.set_ylabel("rows")
    ax.legend(fontsize=7)
    written.append(_save_fig(fig, outdir / "errors.png"))
    plt.close(fig)
    return written


def _save_fig(fig: Any, path: Path) -> Path:
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    return path


def write_report(report: ValidationReport, outdir: str | Path) -> list[Path]:
    """Write ``report.md``, ``report.json``, ``scatter.png`` and ``errors.png`` (atomically)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    if not report.rows:
        raise CalibrationError(
            "nothing to validate: no measurement could be paired with a prediction"
            + (f" ({'; '.join(report.skipped[:3])})" if report.skipped else ""),
            value=0,
            where=str(out),
        )
    from perfmodel.calibration.profile import _public_mode

    paths = _plots(report, out)
    write_json_atomic(out / "report.json", report.to_dict())
    with atomic_write(out / "report.md") as fh:
        fh.write(to_markdown(report))
    written = [out / "report.md", out / "report.json", *paths]
    for p in written:
        _public_mode(p)
    return written


def load_measurements(path: str | Path) -> list[Measurement]:
    """Measurements from a profile JSON, or a JSON/JSONL list of measurement dicts."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise CalibrationError(f"measurements file not found: {p}", value=str(p), where=str(p))
    text = read_text(p)
    stripped = text.lstrip()
    if stripped.startswith("{") and '"format_version"' in text[:2000]:
        from perfmodel.calibration.profile import read_profile

        return list(read_profile(p).measurements)
    if stripped.startswith("["):
        items = parse_json(text, p, error=CalibrationError)
    else:  # JSONL: a bad line is named by its number, "<path>:<line>"
        lines = enumerate(text.splitlines(), 1)
        items = [parse_json(t, f"{p}:{i}", error=CalibrationError) for i, t in lines if t.strip()]
    return [Measurement.from_dict(d, where=f"{p}: [{i}]") for i, d in enumerate(items)]


# ---------------------------------------------------------------------------------------------
# published measurements (../shared/data/published.jsonl)
# ---------------------------------------------------------------------------------------------

_SHAPE_RES = (
    re.compile(r"M=(\d+)\s+N=(\d+)\s+K=(\d+)"),
    re.compile(r"MxNxK=(\d+)x(\d+)x(\d+)"),
)


def _published_gpu(text: str) -> Any | None:
    """Catalogue GPU named by a published row's ``hardware.gpu`` text (longest alias found)."""
    from perfmodel.hardware import list_gpus

    low = text.lower().replace("tesla ", "").replace(" ", "-")
    best: tuple[int, Any] | None = None
    for spec in list_gpus():
        for alias in (spec.name, *spec.aliases):
            a = alias.lower()
            if a and a in low and (best is None or len(a) > best[0]):
                best = (len(a), spec)
    return None if best is None else best[1]


def _published_dtype(text: str) -> str | None:
    low = text.lower()
    for key in ("bf16", "fp16", "tf32", "fp8", "fp32"):
        if key in low:
            return key
    return None


def published_rows(
    rows: Sequence[Mapping[str, Any]], profile: Any | None = None
) -> tuple[list[ValidationRow], list[str]]:
    """GEMM rows of the published data (category ``published_gemm``) predicted with datasheet
    defaults (and with ``profile`` for rows of the profile's own GPU model). Other kinds are counted in the skipped notes: the
    training rows are the scope of ``tests/validation`` through ``perfmodel.api.predict``."""
    from perfmodel.calibration.fit import measurement_layer
    from perfmodel.compute import ComputeModel

    out: list[ValidationRow] = []
    skipped: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.get("kind") != "compute_microbenchmark" or "TFLOP" not in str(row.get("unit", "")):
            skipped[f"{row.get('kind')} rows (not a GEMM rate)"] += 1
            continue
        shape = None
        for rx in _SHAPE_RES:
            mm = rx.search(str(row.get("model", "")))
            if mm:
                shape = tuple(int(x) for x in mm.groups())
                break
        gpu = _published_gpu(str(row.get("hardware", {}).get("gpu", "")))
        dtype = _published_dtype(str(row.get("precision", "")))
        if shape is None or gpu is None or dtype is None:
            skipped["GEMM rows without a parseable shape, catalogued GPU or dtype"] += 1
            continue
        m, n, k = shape
        flop = 2.0 * m * n * k
        measured_s = flop / (float(row["value"]) * TFLOPS)  # the row's unit is TFLOP/s
        probe = Measurement(
            kind=BenchKind.GEMM,
            key=str(row["id"]),
            params={"m": m, "n": n, "k": k, "batch": 1, "dtype": dtype},
            timing=_stats(measured_s),
            work_flop=flop,
        )
        layer, prec = measurement_layer(probe)  # type: ignore[misc]
        variants: dict[str, Any] = {"datasheet": None}
        if profile is not None and profile.gpu_model == gpu.name and profile.compute_params_data:
            variants["calibrated"] = profile.compute_params
        for var, params in variants.items():
            try:
                pred = ComputeModel(gpu, params).layer_time(layer, prec).fwd_s
            except Exception:  # dtype not on this GPU's datasheet
                skipped[f"GEMM rows the model cannot predict ({dtype} on {gpu.name})"] += 1
                continue
            out.append(
                ValidationRow(
                    "published_gemm",
                    f"{row['id']}",
                    var,
                    measured_s,
                    pred,
                    str(row.get("source", ""))[:80],
                )
            )
    return out, [f"{n} {why}" for why, n in skipped.items()]


def _stats(t: float) -> Any:
    from perfmodel.calibration.measurement import TimingStats

    return TimingStats(t, t, t, t, 1)


def validation_variants(profile: Any) -> dict[str, Any]:
    """Parameter variants compared in a report: ``datasheet`` (no calibration), ``gemm+bw``
    (fitted on GEMM and memory microbenchmarks only) and ``full`` (the profile's own fit)."""
    from perfmodel.calibration.fit import GEMM_BW_KINDS, fit_compute_params
    from perfmodel.calibration.runner import base_compute_params

    gpu = profile.device_spec()
    base = base_compute_params(profile, gpu)
    variants: dict[str, Any] = {"datasheet": base}
    try:
        variants["gemm+bw"], _ = fit_compute_params(
            profile.measurements, gpu, base=base, kinds=GEMM_BW_KINDS
        )
    except CalibrationError:
        pass
    if profile.compute_params_data is not None:
        variants["full"] = profile.compute_params
    return variants


def build_report(
    profile: Any,
    measurements: Sequence[Measurement] = (),
    published: Sequence[Mapping[str, Any]] | None = None,
    *,
    title: str | None = None,
) -> ValidationReport:
    """Everything comparable between ``profile``'s predictions and the measurements.

    Steps and layers (from ``measurements``, default the profile's own), the profile's GEMM and
    convolution microbenchmarks, and published GEMM rows when ``published`` is given.
    """
    ms = list(measurements) if measurements else list(profile.measurements)
    try:
        gpu = profile.device_spec()
        variants = validation_variants(profile)
    except CalibrationError:  # e.g. a profile of imported collectives only
        gpu, variants = None, {}
    steps = [m for m in ms if m.kind is BenchKind.STEP]
    layers = [m for m in ms if m.kind is BenchKind.STEP_LAYER]
    src = profile.device.name
    rows: list[ValidationRow] = []
    skipped: list[str] = []
    if gpu is not None:
        rows, skipped = step_rows(steps, layers, gpu, variants, source=src)
        rows += microbenchmark_rows(ms, gpu, variants, source=src)
    rows += fitted_collective_rows(profile, ms, source=src)
    if published is not None:
        prow, pskip = published_rows(published, profile)
        rows += prow
        skipped += pskip
    context = {
        "device": f"{profile.device.name} ({profile.gpu_model or profile.device.kind.value})",
        "profile created": profile.provenance.get("created_utc"),
        "software": ", ".join(
            f"{k} {v}" for k, v in dict(profile.provenance.get("libraries", {})).items()
        ),
        "variants": "datasheet = catalogue peaks x documented efficiencies; gemm+bw = fitted on GEMM + "
        "memory microbenchmarks; full = fitted on all microbenchmarks (GEMM, conv, memory, launch). "
        "Training steps never feed a fit.",
    }
    return ValidationReport(
        tuple(rows),
        title=title or f"perfmodel validation: {profile.device.name}",
        context=context,
        skipped=tuple(skipped),
    )
