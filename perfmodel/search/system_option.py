"""A ``compare --systems`` entry: ``NAME[:key=value[:key=value...]]``, a catalogue system plus
scenario overrides (``network``, ``nics_per_node``, ``gpu``, ``fabric_topology``, ...), e.g.
``dgx1-v100:network=eth-100g`` versus ``dgx1-v100:network=ib-edr``: parsed and checked before
any entry runs (:class:`SystemOption`), and a system's error named as the entry's key
(:func:`option_error`). The hardware what-if (:mod:`perfmodel.search.whatif`) and ``compare
--systems --search`` read them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfmodel.errors import ConfigError

_INT_KEYS = {"nics_per_node", "gpus_per_node"}
#: Keys the what-if sets per point (``nodes = ceil(gpus / gpus_per_node)``): refused in an option
#: (``dgx1-v100:nodes=0`` was accepted and ignored; issue 28, item 11).
_PER_POINT_KEYS = {"nodes", "gpus"}
#: Why an option's key is refused: the what-if sets it per point, or it is the option's name.
_REFUSED_WHY = {
    **{
        k: f"the what-if sets {k} for every GPU count of --gpus (servers = ceil(GPUs / GPUs "
        "per server)); give --gpus instead"
        for k in _PER_POINT_KEYS
    },
    "system": "an entry's system is its name, before the first ':' (NAME:key=value...)",
}
_FLOAT_KEYS = {"oversubscription"}


@dataclass(frozen=True)
class SystemOption:
    """One hardware option: a catalogue system plus scenario overrides."""

    label: str
    system: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse a key of ``overrides`` that no scenario takes, or that the what-if sets
        itself (``system``, ``nodes``, ``gpus``), before any entry runs: the error names the
        entry, the key and the closest accepted one
        (:func:`perfmodel.scenario.check_keys`, the scenario files' check). Before,
        ``compare --systems "dgx-h100:precison=bf16,dgx-a100"`` failed that entry's rows
        only, and exited 0 with the other's.

        Raises
        ------
        ConfigError
            Naming ``--systems entry LABEL`` and the key.
        """
        from perfmodel.scenario import check_keys

        check_keys(
            self.overrides,
            where=f"--systems entry {self.label!r}",
            why=_REFUSED_WHY,
            refused=_REFUSED_WHY,
        )

    @classmethod
    def parse(cls, text: str, *, where: str = "--systems") -> SystemOption:
        """Parse ``NAME[:key=value...]``.

        >>> SystemOption.parse("dgx1-v100:network=ib-edr:nics_per_node=4").overrides
        {'network': 'ib-edr', 'nics_per_node': 4}
        """
        parts = [p.strip() for p in str(text).split(":")]
        if not parts[0]:
            raise ConfigError(f"{where}: empty system name in {text!r}", value=text, where=where)
        over: dict[str, Any] = {}
        for item in parts[1:]:
            if "=" not in item:
                raise ConfigError(
                    f"{where}: {item!r} in {text!r} is not key=value", value=item, where=where
                )
            k, v = (s.strip() for s in item.split("=", 1))
            k = k.replace("-", "_")
            if k in _PER_POINT_KEYS:
                raise ConfigError(
                    f"{where}: {k}={v!r} in {text!r}: {_REFUSED_WHY[k]}", value=item, where=where
                )
            try:
                over[k] = int(v) if k in _INT_KEYS else float(v) if k in _FLOAT_KEYS else v
            except ValueError as exc:
                raise ConfigError(
                    f"{where}: {k}={v!r} is not a number", value=v, where=where
                ) from exc
            if k in _INT_KEYS and over[k] < 1:
                raise ConfigError(
                    f"{where}: {k}={v!r} in {text!r} must be a positive integer",
                    value=v,
                    where=where,
                )
            if k in _FLOAT_KEYS and not (math.isfinite(over[k]) and over[k] >= 1):
                raise ConfigError(
                    f"{where}: {k}={v!r} in {text!r} must be a finite number >= 1",
                    value=v,
                    where=where,
                )
        from perfmodel.topology.builders import check_custom_only

        label = str(text).strip()
        check_custom_only(parts[0], over, form="entry", where=label)
        return cls(label=label, system=parts[0], overrides=over)


def parse_systems(text: str, *, where: str = "--systems") -> list[SystemOption]:
    """Comma-separated list of :meth:`SystemOption.parse` items."""
    opts = [SystemOption.parse(t, where=where) for t in str(text).split(",") if t.strip()]
    if not opts:
        raise ConfigError(f"{where}: no systems given", value=text, where=where)
    labels = [o.label for o in opts]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: a system is listed twice in {text!r}", value=text, where=where)
    return opts


def option_error(option: SystemOption, exc: ConfigError) -> ConfigError:
    """``exc`` (raised building ``option``'s system) as the ``--systems`` entry's error: a
    ``--flag`` it names becomes the entry's key (``--gpus-per-node`` -> ``gpus_per_node``),
    where the option sets system keys as ``NAME:key=value`` (audit15 item 16: ``compare --systems
    custom:gpu=...`` said ``--system custom needs --gpus-per-node``)."""
    msg = exc.args[0] if exc.args else str(exc)
    flag = exc.where if isinstance(exc.where, str) and exc.where.startswith("--") else None
    if flag is not None:
        key = flag[2:].replace("-", "_")
        msg = msg.replace(flag, key).replace("--system ", "system ")
        if key not in option.overrides:
            msg += f" (in the entry: {option.label}:{key}=...)"
    return type(exc)(f"--systems entry {option.label!r}: {msg}", value=exc.value, where="--systems")
