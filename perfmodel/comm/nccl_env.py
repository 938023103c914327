"""NCCL's environment: which algorithms and protocols a job's ``NCCL_*`` variables leave to
NCCL's choice (:class:`NcclEnv`), parsed once at the edge (CLI flag ``--nccl-env``, scenario key
``nccl_env``, a system reference's ``nccl_env`` table) and read by
:class:`~perfmodel.comm.nccl_choice.NcclChoice`.

The variables and their syntax are NCCL's (NVIDIA/nccl v2.26.2-1 and v2.29.7-1; where the two
releases differ, it is said):

- ``NCCL_ALGO`` and ``NCCL_PROTO``: ``src/graph/tuning.cc`` ``parseList`` (lines 53-113 of
  v2.26.2-1, the same rules in v2.29.7-1) and ``ncclTopoTuneModel`` (lines 365-374). The
  value splits on ``;`` into entries, an entry on ``:`` into ``collective:list``, a list on
  ``,`` into names, each with ``strtok_r``, so empty pieces are skipped (``LL,,Simple`` and
  ``ring;`` are accepted, an empty value changes nothing) and nothing is stripped (``ring,
  tree`` names ``" tree"``, an error in NCCL and here). A list naming some enables those and
  disables the rest; one leading ``^`` disables those and enables the rest (``^`` alone
  enables all; ``^^ring`` names ``"^ring"``, an error); entries after the first must name a
  collective first (``allreduce:tree``), acting on that collective alone; every name is
  compared without case. The names are ``ncclAlgoStr`` / ``ncclProtoStr`` / ``ncclFuncStr``
  of ``src/init.cc`` (lines 42-44): Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree,
  PAT; LL, LL128, Simple; Broadcast, Reduce, AllGather, ReduceScatter, AllReduce. An unknown
  name is NCCL's ``ncclInvalidUsage`` at init; here a :class:`~perfmodel.errors.ConfigError`
  naming the variable and where it was stated.
- ``NCCL_NVLS_ENABLE``: an integer (``NCCL_PARAM(NvlsEnable, "NVLS_ENABLE", 2)``,
  ``src/transport/nvls.cc`` line 147): ``0`` leaves ``nvlsSupport`` at 0, so neither NVLS nor
  NVLS tree is offered (line 157); any other value keeps them where the hardware offers them;
  empty is the default (``ncclLoadParam``, ``src/misc/param.cc`` lines 74-92). DIFFERENCE:
  NCCL reads the value with ``strtoll`` (text without leading digits, ``off``, reads as 0;
  a value out of range falls back to the default, 2); the model raises a ConfigError on
  anything but an integer, as such text is almost surely a mistake.
- ``NCCL_COLLNET_ENABLE``: v2.26.2-1 ``src/init.cc`` lines 822-830 turn CollNet on for
  ``"1"`` only; v2.29.7-1 ``src/init.cc`` lines 1885-1893 read an integer (``strtol``), any
  non-zero on. The model offers CollNet where the fabric is SHARP-capable (``sharp``), which
  stands for on; a value both releases read as off (``strtol`` 0: ``0``, `` 0``) switches it
  off, ``1`` keeps it; any other value (``2``: on in 2.29, off in 2.26) is a ConfigError
  naming the difference.

Every other ``NCCL_*`` variable is kept (for reports) and changes nothing the model prices.
CollNet Chain has no model (only CollNet Direct, :data:`Algorithm.COLLNET`): naming it enables
nothing, and a list that names only it leaves CollNet Direct off.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfmodel import _schema
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp

#: ``ncclFuncStr`` (NVIDIA/nccl ``src/init.cc``): the collectives ``NCCL_ALGO`` / ``NCCL_PROTO``
#: entries may name, lower-cased.
NCCL_FUNCTIONS: Mapping[str, CollectiveOp] = {
    "broadcast": CollectiveOp.BROADCAST,
    "reduce": CollectiveOp.REDUCE,
    "allgather": CollectiveOp.ALLGATHER,
    "reducescatter": CollectiveOp.REDUCESCATTER,
    "allreduce": CollectiveOp.ALLREDUCE,
}

#: ``ncclAlgoStr``, lower-cased -> the model's algorithm (``None``: CollNet Chain, not modelled).
NCCL_ALGORITHMS: Mapping[str, Algorithm | None] = {
    "tree": Algorithm.TREE,
    "ring": Algorithm.RING,
    "collnetdirect": Algorithm.COLLNET,
    "collnetchain": None,
    "nvls": Algorithm.NVLS,
    "nvlstree": Algorithm.NVLS_TREE,
    "pat": Algorithm.PAT,
}

#: ``ncclProtoStr``, lower-cased.
NCCL_PROTOCOLS: Mapping[str, Protocol] = {
    "ll": Protocol.LL,
    "ll128": Protocol.LL128,
    "simple": Protocol.SIMPLE,
}

#: The algorithms NCCL's tuner chooses among (what ``NCCL_ALGO`` can switch).
TUNED_ALGORITHMS: frozenset[Algorithm] = frozenset(a for a in NCCL_ALGORITHMS.values() if a)


@dataclass(frozen=True)
class NcclEnv:
    """What a job's NCCL environment leaves to NCCL's choice.

    Attributes
    ----------
    disabled
        ``(collective, algorithm)`` pairs the environment switches off.
    disabled_protocols
        ``(collective, protocol)`` pairs the environment switches off.
    ll128_stated
        Collectives whose LL128 ``NCCL_PROTO`` turns on explicitly (any ``NCCL_PROTO`` entry
        for a collective that leaves LL128 on, ``^LL`` included): NCCL then skips its LL128
        enable rule (``protoEnable`` 1, not the default 2: v2.26.2-1 ``src/graph/tuning.cc``
        lines 424-438), where the GPUs can run it (Volta and newer).
    variables
        The ``(name, value)`` pairs as stated, sorted by name (for reports).
    where
        Where they were stated (``--nccl-env``, ``scenario.nccl_env``, a system file's
        reference).
    """

    disabled: frozenset[tuple[CollectiveOp, Algorithm]] = frozenset()
    disabled_protocols: frozenset[tuple[CollectiveOp, Protocol]] = frozenset()
    ll128_stated: frozenset[CollectiveOp] = frozenset()
    variables: tuple[tuple[str, str], ...] = ()
    where: str = field(default="", compare=False)

    def __bool__(self) -> bool:
        """Whether any variable is stated (:data:`DEFAULT_ENV`, none, is false)."""
        return bool(self.variables)

    @property
    def default(self) -> bool:
        """Whether nothing is switched off or forced on (NCCL's own choice, unchanged)."""
        return not self.disabled and not self.disabled_protocols and not self.ll128_stated

    def allows(self, op: CollectiveOp, algo: Algorithm, proto: Protocol | None = None) -> bool:
        """Whether ``algo`` (with ``proto``, when given) stays in NCCL's choice for ``op``.

        >>> env = NcclEnv.parse([("NCCL_ALGO", "^NVLS"), ("NCCL_PROTO", "allreduce:^LL")])
        >>> env.allows(CollectiveOp.ALLREDUCE, Algorithm.NVLS), env.allows(
        ...     CollectiveOp.ALLREDUCE, Algorithm.RING, Protocol.LL)
        (False, False)
        >>> env.allows(CollectiveOp.ALLGATHER, Algorithm.RING, Protocol.LL)
        True
        """
        if (op, algo) in self.disabled:
            return False
        return proto is None or (op, proto) not in self.disabled_protocols

    def off(self, op: CollectiveOp) -> tuple[Algorithm, ...]:
        """The algorithms switched off for ``op``, in the enum's order."""
        return tuple(a for a in Algorithm if (op, a) in self.disabled)

    def text(self) -> str:
        """The variables as ``NAME=VALUE, ...`` (empty: none stated)."""
        return ", ".join(f"{k}={v}" for k, v in self.variables)

    @classmethod
    def parse(cls, pairs: Iterable[tuple[str, str]], *, where: str = "--nccl-env") -> NcclEnv:
        """The environment of ``(name, value)`` pairs (later pairs of a name win, as in a
        shell). Raises :class:`~perfmodel.errors.ConfigError` naming the variable and
        ``where`` for a name outside ``NCCL_*``, a value that is not text, an unknown
        algorithm, protocol or collective name, or a non-integer ``NCCL_NVLS_ENABLE``.

        >>> env = NcclEnv.parse([("NCCL_NVLS_ENABLE", "0"), ("NCCL_DEBUG", "INFO")])
        >>> [a.value for a in env.off(CollectiveOp.ALLREDUCE)]
        ['nvls', 'nvls_tree']
        >>> [a.value for a in NcclEnv.parse([("NCCL_ALGO", "Ring")]).off(CollectiveOp.ALLREDUCE)]
        ['tree', 'nvls', 'collnet', 'nvls_tree', 'pat']
        """
        stated: dict[str, str] = {}
        for name, value in pairs:
            if not isinstance(name, str) or not name.startswith("NCCL_"):
                raise ConfigError(
                    f"{where}: {name!r} is not an NCCL_* variable",
                    value=name,
                    where=where,
                )
            if not isinstance(value, str):
                raise ConfigError(
                    f"{where}: {name} = {value!r}: expected text (NCCL reads strings)",
                    value=value,
                    where=where,
                )
            stated[name] = value  # as NCCL's getenv reads it: nothing stripped
        algos = {(op, a): 1 for op in NCCL_FUNCTIONS.values() for a in TUNED_ALGORITHMS}
        # NCCL's protoEnable: 1 on, 0 off, 2 (LL128's default) for its enable rule to decide
        protos = {
            (op, p): 2 if p is Protocol.LL128 else 1
            for op in NCCL_FUNCTIONS.values()
            for p in Protocol
        }
        if "NCCL_PROTO" in stated:
            _parse_list("NCCL_PROTO", stated["NCCL_PROTO"], NCCL_PROTOCOLS, protos, where)
        if "NCCL_ALGO" in stated:
            _parse_list("NCCL_ALGO", stated["NCCL_ALGO"], NCCL_ALGORITHMS, algos, where)
        if stated.get("NCCL_NVLS_ENABLE"):  # empty: the default (ncclLoadParam)
            text = stated["NCCL_NVLS_ENABLE"]
            if _INTEGER.fullmatch(text) is None:  # strtoll's forms only, nothing after them
                raise ConfigError(
                    f"{where}: NCCL_NVLS_ENABLE={text!r}: expected an integer (0 off, 1 on, "
                    "2 auto: NCCL's default)",
                    value=text,
                    where=where,
                )
            if _strtol(text) == 0:
                for op in NCCL_FUNCTIONS.values():
                    algos[op, Algorithm.NVLS] = algos[op, Algorithm.NVLS_TREE] = 0
        if "NCCL_COLLNET_ENABLE" in stated:
            text = stated["NCCL_COLLNET_ENABLE"]
            if text != "1" and _strtol(text) != 0:
                raise ConfigError(
                    f"{where}: NCCL_COLLNET_ENABLE={text!r}: expected 0 or 1 (NCCL 2.26 turns "
                    'CollNet on for "1" only, 2.29 for any non-zero integer)',
                    value=text,
                    where=where,
                )
            if text != "1":
                for op in NCCL_FUNCTIONS.values():
                    algos[op, Algorithm.COLLNET] = 0
        return cls(
            disabled=frozenset(k for k, on in algos.items() if not on),
            disabled_protocols=frozenset(k for k, on in protos.items() if not on),
            ll128_stated=frozenset(
                op for (op, p), on in protos.items() if p is Protocol.LL128 and on == 1
            ),
            variables=tuple(sorted(stated.items())),
            where=where,
        )

    @classmethod
    def of(cls, value: Any, *, where: str = "scenario.nccl_env") -> NcclEnv:
        """The environment of any form a scenario states it in, parsed once: an
        :class:`NcclEnv` as it is (keeping where it was stated), a table
        ``{NCCL_ALGO = "^NVLS"}`` (a scenario file), ``NAME=VALUE`` texts (``--nccl-env``,
        repeatable: a later one of a name wins), ``(name, value)`` pairs (what
        :meth:`~perfmodel.scenario.Scenario.to_dict` writes); ``None`` is none. Anything else
        is a :class:`~perfmodel.errors.ConfigError` naming ``where``.

        >>> env = NcclEnv.of(["NCCL_PROTO=^LL128"], where="--nccl-env")
        >>> NcclEnv.of(env) is env, NcclEnv.of([("NCCL_PROTO", "^LL128")]) == env, env.where
        (True, True, '--nccl-env')
        """
        if isinstance(value, NcclEnv):
            return value
        if value is None:
            return DEFAULT_ENV
        if isinstance(value, Mapping):
            pairs = list(value.items())
        elif isinstance(value, list | tuple):
            pairs = []
            for item in value:
                if isinstance(item, str):
                    pairs += split_assignments([item], where=where)
                elif isinstance(item, list | tuple) and len(item) == 2:
                    pairs.append((item[0], item[1]))
                else:
                    raise ConfigError(
                        f"{where}: {item!r}: expected NAME=VALUE or a (name, value) pair",
                        value=item,
                        where=where,
                    )
        else:
            raise ConfigError(
                f'{where}: expected a table of NCCL_* = "value" or a list of NAME=VALUE, '
                f"got {value!r}",
                value=value,
                where=where,
            )
        return cls.parse(pairs, where=where)

    @classmethod
    def parse_assignments(cls, items: Iterable[str], *, where: str = "--nccl-env") -> NcclEnv:
        """The environment of ``NAME=VALUE`` texts (the ``--nccl-env`` flag, repeatable).

        >>> NcclEnv.parse_assignments(["NCCL_NVLS_ENABLE=0"]).variables
        (('NCCL_NVLS_ENABLE', '0'),)
        """
        return cls.parse(split_assignments(items, where=where), where=where)


def split_assignments(items: Iterable[str], *, where: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` texts as ``(name, value)`` pairs, the values unstripped as NCCL reads them
    (:func:`perfmodel._schema.split_assignments`, with an NCCL example in its error)."""
    return _schema.split_assignments(items, where=where, example="NCCL_NVLS_ENABLE=0")


#: What C's ``strtol(text, NULL, 0)`` reads as a whole number (:func:`_strtol`), blanks around
#: it allowed: a decimal, ``0x`` hexadecimal or ``0`` octal integer (``"010"`` is 8, as NCCL
#: reads it; Python's ``int(text, 0)`` rejects it).
_INTEGER = re.compile(r"\s*[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*")


def _strtol(text: str) -> int:
    """C's ``strtol(text, NULL, 0)``: leading white space, a sign, then the longest prefix of
    a decimal, ``0x`` hexadecimal or ``0`` octal number; 0 where there is none.

    >>> _strtol(" 12abc"), _strtol("0x1f"), _strtol("010"), _strtol("off"), _strtol("-3")
    (12, 31, 8, 0, -3)
    """
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if m is None:
        return 0
    sign, digits = m.groups()
    if digits[:2].lower() == "0x":
        value = int(digits[2:], 16)
    elif digits.startswith("0"):
        value = int(digits, 8)
    else:
        value = int(digits)
    return -value if sign == "-" else value


def _parse_list(
    name: str,
    text: str,
    elems: Mapping[str, object],
    enabled: dict[tuple[CollectiveOp, Any], int],
    where: str,
) -> None:
    """NCCL's ``parseList`` on ``enabled`` (``(collective, element) -> 1 on / 0 off``): for each
    ``;``-separated entry, ``[collective:][^]name,name...``; the first entry alone may omit the
    collective (then it sets every collective). Split as ``strtok_r`` splits: empty pieces
    skipped, nothing stripped (the module docstring)."""
    for i, entry in enumerate(text.split(";")):
        if not entry:
            continue  # strtok_r skips empty entries
        parts = [p for p in entry.split(":") if p]
        prefix, elem_list = [*parts, None, None][:2]
        if elem_list is None:
            if i > 0:  # NCCL: the first token must start the value to lack a collective
                raise ConfigError(
                    f"{where}: {name}={text!r}: every entry but the first must name a "
                    f"collective ({', '.join(NCCL_FUNCTIONS)}): {entry!r}",
                    value=text,
                    where=where,
                )
            prefix, elem_list = None, prefix
        if elem_list is None:  # an entry of colons alone
            raise ConfigError(
                f"{where}: {name}={text!r}: entry {entry!r} names nothing",
                value=text,
                where=where,
            )
        if prefix is not None and prefix.lower() not in NCCL_FUNCTIONS:
            raise ConfigError(
                f"{where}: {name}={text!r}: unknown collective {prefix!r} (NCCL's are "
                f"{', '.join(NCCL_FUNCTIONS)})",
                value=text,
                where=where,
            )
        on = not elem_list.startswith("^")
        if not on:
            elem_list = elem_list[1:]  # one caret: NCCL reads a second as part of the name
        names = [e.lower() for e in elem_list.split(",") if e]
        for e in names:
            if e not in elems:
                raise ConfigError(
                    f"{where}: {name}={text!r}: unknown name {e!r} (NCCL's are "
                    f"{', '.join(elems)}, any case; no spaces)",
                    value=text,
                    where=where,
                )
        ops = [NCCL_FUNCTIONS[prefix.lower()]] if prefix else list(NCCL_FUNCTIONS.values())
        targets = {v for v in elems.values() if v is not None}
        for op in ops:
            for v in targets:
                enabled[op, v] = int(not on)
            for e in names:
                if elems[e] is not None:
                    enabled[op, elems[e]] = int(on)


#: No variable stated: NCCL's own choice.
DEFAULT_ENV = NcclEnv()


def nccl_env_of(topology: object) -> NcclEnv:
    """The environment recorded on a topology (:func:`with_nccl_env`), else :data:`DEFAULT_ENV`."""
    env = getattr(topology, "meta", {}).get("nccl_env")
    return env if isinstance(env, NcclEnv) else DEFAULT_ENV


def with_nccl_env(topology, env: NcclEnv):  # type: ignore[no-untyped-def]
    """The same system run under NCCL environment ``env`` (recorded in ``meta["nccl_env"]``,
    replacing one recorded before; :data:`DEFAULT_ENV` removes it)."""
    import dataclasses

    meta = dict(topology.meta)
    meta.pop("nccl_env", None)
    if env.variables:
        meta["nccl_env"] = env
    return dataclasses.replace(topology, meta=meta)
