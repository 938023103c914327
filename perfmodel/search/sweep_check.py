"""A sweep spec's axes checked before any work (audit 15, item 13).

``perfmodel sweep`` promises that its input is checked "before it does any work"
(``docs/cli.md``). A grid point fails at run time for reasons of the whole scenario (a plan
that does not divide, out of memory): those stay error rows. What is wrong with an axis value
on its own is refused up front, before the output file is opened, with a
:class:`SweepAxisError` naming the spec file, the axis and the value:

* an axis that is not a scenario key;
* a value the scenario parser refuses (an unknown system, model, precision, software preset,
  a non-positive count ...): the parser's error whose offending value is the axis value;
* a GPU count that the hardware of a grid point does not have (``gpus = 9`` on one 8-GPU
  server): every combination of the values of the axes that set the GPUs (``system``,
  ``nodes``, ``gpus``) is checked against the system file's GPUs per server
  (:func:`perfmodel.topology.builders.gpus_per_server`) times ``nodes``, as the resolver
  does (``perfmodel.pipeline.resolve._gpus_used``).

An error at run time that still names an axis value (its ``value`` is the point's value of an
axis) says so in the error row (:func:`row_error`), so a row never blames a flag the user did
not type.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from perfmodel.errors import ConfigError, PerfModelError

if TYPE_CHECKING:
    from perfmodel.search.sweep import SweepSpec

#: Scenario keys whose combination sets the GPUs a point has and asks for.
GPU_COUNT_KEYS = ("system", "nodes", "gpus")
#: ``system`` values that are not catalogue systems or files (built from other keys).
_BUILT_SYSTEMS = ("custom", "calibrated")


class SweepAxisError(ConfigError):
    """A sweep spec's axis value that no grid point can run (``where``: ``FILE:axes.NAME``)."""


def builds_scenarios(evaluator: Callable[..., Any] | None) -> bool:
    """Whether ``evaluator`` reads its points as :class:`perfmodel.api.Scenario` (the default
    and perfmodel's own evaluators, also through ``functools.partial``); a caller's evaluator
    may take other keys, and its points are not checked."""
    if evaluator is None:
        return True
    f = evaluator.func if isinstance(evaluator, functools.partial) else evaluator
    return getattr(f, "__module__", "") == "perfmodel.search._eval"


def _axes(spec: SweepSpec) -> Iterator[tuple[str, str, tuple[Any, ...]]]:
    """``(section, name, values)`` of every axis (``axes`` then ``zip``)."""
    for name, values in spec.axes:
        yield "axes", name, values
    for name, values in spec.zipped:
        yield "zip", name, values


def _distinct(values: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def check_spec(spec: SweepSpec) -> None:
    """Refuse a sweep whose axis values cannot run, before any work.

    Raises
    ------
    SweepAxisError
        Naming the spec file, the axis (``axes.system``, ``zip.gpus``) and the value.
    """
    first = {name: values[0] for _s, name, values in _axes(spec)}
    for section, name, values in _axes(spec):
        for v in _distinct(values):
            _check_value(spec, section, name, v, {**first, name: v})
    _check_gpu_counts(spec)
    check_spec_keys(spec)  # [base] keys and dotted sub-keys no axis value reaches


def check_spec_keys(spec: SweepSpec, *, why: Mapping[str, str] | None = None) -> None:
    """Refuse, before any work, a key of the sweep file's ``[base]``, ``[axes]`` or ``[zip]``
    that no row's scenario takes (:func:`perfmodel.scenario.check_keys`: the closest key and
    every accepted one; user23 item 3: a typo such as ``precison`` in ``[base]`` made every
    row an error, exit 0), and a dotted axis whose sub-key its table does not take
    (:func:`check_sub_key`). ``why``: the reason to give for a refused key (``perfmodel
    sweep`` explains ``predict``'s scenario-file keys that are no scenario keys,
    ``cli.sweep.predict_file_why``). :func:`check_spec` runs it, so the API's
    :func:`~perfmodel.search.sweep.run_sweep` refuses what the CLI refuses.

    Raises
    ------
    ConfigError
        Naming the file, the table and the key.
    """
    from perfmodel.scenario import check_keys

    why = dict(why or {})
    why.update(
        (
            str(k),
            "[base] takes no dotted key (only [axes] and [zip] reach into a table); "
            f"write a table: [base.{str(k).split('.')[0]}]",
        )
        for k in spec.base
        if "." in str(k)
    )
    check_keys(spec.base, where=f"{spec.source}: [base]", why=why)
    for table, pairs in (("axes", spec.axes), ("zip", spec.zipped)):
        names = [str(name) for name, _ in pairs]
        check_keys((n.split(".")[0] for n in names), where=f"{spec.source}: [{table}]", why=why)
        for name in names:
            if "." in name:
                check_sub_key(spec, name, where=f"{spec.source}: [{table}] {name}: ")
    base_args = spec.base.get("model_args")
    if isinstance(base_args, Mapping):
        for model in grid_models(spec):
            model.check_arguments(list(base_args), where=f"{spec.source}: [base.model_args]: ")


#: The scenario keys whose value is a table, which a dotted sweep axis ``KEY.NAME`` reaches into
#: (:func:`perfmodel.search.sweep_check.set_dotted`).
TABLE_KEYS = ("model_args", "software_options", "nccl_env", "plan")


def check_sub_key(spec: Any, name: str, *, where: str) -> None:
    """Refuse the dotted axis ``name`` (``KEY.SUB``) whose ``SUB`` its table does not take:
    a ``model_args`` name that a model of the grid (:func:`grid_models`) has no argument of
    (the model builder's own check and words, :meth:`ModelInfo.check_arguments
    <perfmodel.workload.zoo.ModelInfo.check_arguments>`), an unknown ``software_options``
    name, an ``nccl_env`` variable outside ``NCCL_*``, a ``plan`` key that is no scenario key,
    and a sub-key of a key that holds one value (``gpus.x``). Each would make every row an
    error (rev29 item 1).

    Raises
    ------
    ConfigError
        ``where`` first, then why.
    """
    from perfmodel.parallel.software import software_option_key
    from perfmodel.scenario import check_keys

    top, sub = name.split(".")[:2]
    top = top.replace("-", "_")
    held = {k.replace("-", "_"): v for k, v in spec.base.items()}.get(top)
    if top in TABLE_KEYS and held is not None and not isinstance(held, Mapping):
        raise ConfigError(
            f"{where}[base] {top} = {held!r} is not a table, so the axis would replace it "
            f"(rev30): write [base.{top}] as a table (plan: tp = 2, pp = 4)",
            value=held,
            where=where.rstrip(": "),
        )
    if top == "model_args":
        for model in grid_models(spec):
            model.check_arguments([sub], where=where)
    elif top == "software_options":
        software_option_key(sub, where=where.rstrip(": "))
    elif top == "plan":
        check_keys([sub], where=where.rstrip(": "))
    elif top == "nccl_env" and not sub.startswith("NCCL_"):
        raise ConfigError(
            f"{where}{sub!r} is no NCCL variable (nccl_env takes NCCL_* names)",
            value=sub,
            where=where.rstrip(": "),
        )
    elif top not in TABLE_KEYS:
        raise ConfigError(
            f"{where}{top!r} holds one value, not a table: a dotted key reaches into "
            f"{', '.join(TABLE_KEYS)} only (model_args.layers)",
            value=name,
            where=where.rstrip(": "),
        )


def grid_models(spec: Any) -> list[Any]:
    """The zoo entries (:class:`perfmodel.workload.zoo.ModelInfo`) of the models the grid's rows
    build: the values of a ``model`` axis, else ``[base]``'s model, else the scenario's
    default; a name that is no zoo model is left to
    :func:`perfmodel.search.sweep_check.check_spec`."""
    from perfmodel.errors import PerfModelError
    from perfmodel.scenario import Scenario
    from perfmodel.workload.zoo import get_model_info

    axis = [values for n, values in (*spec.axes, *spec.zipped) if n == "model"]
    names = list(axis[0]) if axis else [spec.base.get("model", Scenario.model)]
    out = []
    for name in dict.fromkeys(n for n in names if isinstance(n, str)):
        try:
            out.append(get_model_info(name))
        except PerfModelError:
            continue
    return out


def set_dotted(d: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``d[a][b][c] = value`` for ``dotted = "a.b.c"`` (a sweep axis reaching into nested
    tables, ``"model_args.depth"``), copying the tables on the way."""
    parts = dotted.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.get(p)
        nxt = dict(nxt) if isinstance(nxt, Mapping) else {}
        cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def _check_value(
    spec: SweepSpec, section: str, name: str, value: Any, axis_values: Mapping[str, Any]
) -> None:
    """Parse the point of ``axis_values`` as far as one scenario's fields go (no model, no
    topology built); a refusal whose offending value is ``value`` is the axis's."""
    from perfmodel.api import Scenario
    from perfmodel.scenario_parse import parse_scenario
    from perfmodel.topology.builders import system_path
    from perfmodel.workload.zoo import get_model_info

    where = f"{spec.source}:{section}.{name}"
    top = name.split(".")[0]
    known = {f.name for f in dataclasses.fields(Scenario)} | {"plan", "microbatch_size"}
    if top.replace("-", "_") not in known:
        raise SweepAxisError(
            f"{where}: {top!r} is not a scenario key (the keys of `perfmodel predict`, "
            "docs/predict.md: system, nodes, gpus, model, precision, ...)",
            value=name,
            where=where,
        )
    try:
        if top == "system" and isinstance(value, str) and value not in _BUILT_SYSTEMS:
            system_path(value)
        if top == "model" and isinstance(value, str):
            get_model_info(value)
        parse_scenario(Scenario.from_dict(spec.point(axis_values), where=where))
    except PerfModelError as exc:
        if _offends(exc, value):
            raise SweepAxisError(
                f"{where} = {value!r}: {_message(exc)}", value=value, where=where
            ) from exc


def _offends(exc: BaseException, value: Any) -> bool:
    bad = getattr(exc, "value", None)
    try:
        return bool(bad == value) and type(bad) is type(value)
    except Exception:  # pragma: no cover - an exotic value that cannot be compared
        return False


def _check_gpu_counts(spec: SweepSpec) -> None:
    """Refuse a ``gpus`` value that no combination of the ``system`` / ``nodes`` values the
    grid reaches can run (more GPUs than every such point's hardware has). A value that some
    combination runs passes: its other corners stay error rows naming the axis value
    (:func:`row_error`), as every run-time refusal does."""
    from perfmodel.scenario import Scenario
    from perfmodel.scenario_parse import pos_int
    from perfmodel.topology.builders import gpus_per_server

    # a point that names no system / nodes runs on the scenario's defaults (class attributes)
    default_system, default_nodes = Scenario.system, Scenario.nodes
    varied = [(s, n, v) for s, n, v in _axes(spec) if n in GPU_COUNT_KEYS]
    if not any(n == "gpus" for _s, n, _v in varied) and "gpus" not in spec.base:
        return
    if "gpus_per_node" in spec.base or any(n == "gpus_per_node" for _s, n, _v in _axes(spec)):
        return
    plain = [(s, n, _distinct(v)) for s, n, v in varied if s == "axes"]
    zipped = [(s, n, v) for s, n, v in varied if s == "zip"]
    zip_rows = _distinct(tuple(zip(*(v for _s, _n, v in zipped)))) if zipped else [()]
    runs: dict[int, bool] = {}  # gpus value -> some combination has the GPUs (or is unchecked)
    short: dict[int, tuple[dict[str, Any], str, int, int]] = {}  # its first short point
    for combo in itertools.product(*(v for _s, _n, v in plain), zip_rows):
        at = dict(zip((n for _s, n, _v in plain), combo[:-1]))
        at.update(zip((n for _s, n, _v in zipped), combo[-1]))
        point = {**{k: spec.base[k] for k in GPU_COUNT_KEYS if k in spec.base}, **at}
        system, gpus = point.get("system", default_system), point.get("gpus")
        if not isinstance(gpus, int) or isinstance(gpus, bool):
            continue
        if not isinstance(system, str) or system in _BUILT_SYSTEMS:
            runs[gpus] = True
            continue
        try:
            nodes = pos_int(point.get("nodes", default_nodes), "nodes")
            have = gpus_per_server(system) * nodes
        except PerfModelError:
            runs[gpus] = True  # the value checks name a bad system or nodes value
            continue
        runs[gpus] = runs.get(gpus, False) or gpus <= have
        if gpus > have:
            short.setdefault(gpus, (point, system, nodes, have))
    for gpus, ok in runs.items():
        if ok:
            continue
        point, system, nodes, have = short[gpus]
        section = {n: s for s, n, _v in varied}
        where = f"{spec.source}:{section.get('gpus', 'base')}.gpus"
        others = ", ".join(
            f"{section[k]}.{k} = {point[k]!r}" if k in section else f"base {k} = {point[k]!r}"
            for k in ("system", "nodes")
            if k in point
        )
        raise SweepAxisError(
            f"{where} = {gpus}: no grid point has the GPUs; the one with "
            f"{others or 'the default system'} has {have} GPUs ({system}: {have // nodes} per "
            f"server x nodes={nodes}); no scenario with this value can run: raise nodes, drop "
            "the value, or pair systems and GPU counts in a [zip] table",
            value=gpus,
            where=where,
        )


def row_error(exc: BaseException, axis_values: Mapping[str, Any]) -> str:
    """An error row's message: ``str(exc)``, or, when the error's offending value is a grid
    point's axis value, its sentence without the flag or field it names (``--system:``) and
    ``(sweep axis NAME = VALUE)``: the value came from the spec, not from a flag."""
    names = [n for n, v in axis_values.items() if _offends(exc, v)]
    if not names or not isinstance(exc, PerfModelError):
        return str(exc)
    return (
        _message(exc)
        + " ("
        + ", ".join(f"sweep axis {n} = {axis_values[n]!r}" for n in names)
        + ")"
    )


def _message(exc: PerfModelError) -> str:
    """The error's sentence without the ``where:`` prefix :class:`PerfModelError` adds."""
    return str(exc.args[0]) if exc.args else str(exc)


__all__ = [
    "GPU_COUNT_KEYS",
    "SweepAxisError",
    "builds_scenarios",
    "check_spec",
    "row_error",
    "set_dotted",
]
