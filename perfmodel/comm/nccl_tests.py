"""Reading nccl-tests logs (github.com/NVIDIA/nccl-tests) into measurements.

Text logs: the table rows are ``size count type [redop] [root] time algbw busbw #wrong
[time algbw busbw #wrong]`` (out-of-place, then in-place). nccl-tests 2.0-era logs lack the
``root`` column (and all-gather lacks ``redop``) and print ``error`` instead of ``#wrong``; newer
logs have both. Times are microseconds, bandwidths GB/s (decimal), sizes bytes. Header lines start
with ``#``; ``NCCL INFO``/``WARN`` debug lines may be interleaved anywhere. ``# Avg bus bandwidth``
is kept. A row that does not parse is skipped and reported (line number, text, reason) while the
good rows are kept; a log with no parseable row raises :class:`~perfmodel.errors.ParseError`.

JSON (``-J``): the schema changed between nccl-tests versions, so the reader walks the document
and takes every object that has a ``size`` and a time or bus bandwidth, directly or under
``out_of_place``/``in_place`` (case and ``_`` insensitive).

Definitions (nccl-tests doc/PERFORMANCE.md): ``algbw = size / time``,
``busbw = algbw x bus_factor(op, nranks)``.
"""

from __future__ import annotations

import enum
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel import units
from perfmodel._io import parse_json
from perfmodel.comm.p2p_read import ProcessLayout
from perfmodel.errors import ParseError
from perfmodel.ops import CollectiveOp

_OPS_BY_BINARY = {
    "all_reduce": CollectiveOp.ALLREDUCE,
    "all_gather": CollectiveOp.ALLGATHER,
    "reduce_scatter": CollectiveOp.REDUCESCATTER,
    "broadcast": CollectiveOp.BROADCAST,
    "reduce": CollectiveOp.REDUCE,
    "alltoall": CollectiveOp.ALLTOALL,
    "sendrecv": CollectiveOp.SENDRECV,
}
_DTYPES = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float16", "float",
    "float32", "double", "float64", "bfloat16", "fp8_e4m3", "fp8_e5m2", "f8e4m3", "f8e5m2",
    "char", "int", "uint",
}  # fmt: skip
_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "premulsum", "mulsum"}
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device")
_PID_RE = re.compile(r"\bPid\s+(\d+)\b")
_NGPUS_RE = re.compile(r"nGpus\s+(\d+)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_BIN_RE = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv)_perf\b"
)


@dataclass(frozen=True)
class NcclTestsRow:
    """One message size of an nccl-tests log (SI units)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    inplace_time_s: float | None = None
    inplace_algbw_Bps: float | None = None
    inplace_busbw_Bps: float | None = None
    line: int = 0


@dataclass(frozen=True)
class SkippedLine:
    line: int
    text: str
    reason: str


@dataclass(frozen=True)
class NcclTestsLog:
    """A parsed nccl-tests log.

    Attributes
    ----------
    op
        The collective, from the binary name in the log (``all_reduce_perf``), the caller, or
        ``None`` when neither says.
    ranks, hosts
        Ranks listed under "Using devices" (0 if absent) and their distinct host names.
    rows
        The parsed rows; ``skipped`` lists the rejected table lines and why.
    rank_processes
        ``(host, pid)`` of each rank listed with a ``Pid`` (nccl-tests' ``common.cu`` prints
        ``Rank r [Group g] Pid p on host device d``, one line per rank in rank order); empty when
        the log lists none (JSON logs, older layouts). :attr:`processes` reads the job's layout
        from it.
    """

    rows: tuple[NcclTestsRow, ...]
    op: CollectiveOp | None = None
    ranks: int = 0
    hosts: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    avg_busbw_Bps: float | None = None
    skipped: tuple[SkippedLine, ...] = ()
    source: str = "<text>"
    layout: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    rank_processes: tuple[tuple[str, int], ...] = ()

    @property
    def nodes(self) -> int:
        return max(1, len(self.hosts))

    @property
    def processes(self) -> ProcessLayout | None:
        """The run's process layout from :attr:`rank_processes`: one process per GPU when
        every rank has its own ``(host, pid)``, one per server when every host's ranks share
        one pid (nccl-tests ``-g N`` or ``-t N`` with ``N`` = the host's GPUs); ``None`` when
        the log lists no pids, has one rank, or mixes the two (``-g 2`` under ``mpirun -np 4``
        on 8 GPUs: some ring neighbours share a process, some do not; not modelled).

        >>> NcclTestsLog(rows=(), rank_processes=(("a", 7), ("a", 7), ("b", 9), ("b", 9))).processes
        <ProcessLayout.PER_SERVER: 'per-server'>
        >>> NcclTestsLog(rows=(), rank_processes=(("a", 7), ("a", 8))).processes
        <ProcessLayout.PER_GPU: 'per-gpu'>
        >>> NcclTestsLog(rows=(), rank_processes=(("a", 7), ("a", 7), ("a", 8), ("a", 8))).processes is None
        True
        """
        procs = self.rank_processes
        if len(procs) < 2:
            return None
        if len(set(procs)) == len(procs):
            return ProcessLayout.PER_GPU
        per_host: dict[str, set[int]] = {}
        for host, pid in procs:
            per_host.setdefault(host, set()).add(pid)
        if all(len(pids) == 1 for pids in per_host.values()):
            return ProcessLayout.PER_SERVER
        return None


def _num(tok: str) -> float:
    return float(tok)


def _parse_row(tokens: list[str]) -> tuple[dict[str, Any], str]:
    """Parse one table row; raise ValueError with the reason."""
    if len(tokens) < 7:
        raise ValueError(f"too few columns ({len(tokens)})")
    size = int(tokens[0])
    count = int(tokens[1])
    dtype = tokens[2]
    if dtype.lower() not in _DTYPES:
        raise ValueError(f"unknown data type {dtype!r}")
    rest = tokens[3:]
    redop, root = "none", -1
    # Optional redop (a word) and root (an integer) before the numeric block.
    if rest and rest[0].lower() in _REDOPS:
        redop = rest.pop(0)
    bad = [t for t in rest if not _is_number(t) and t.upper() != "N/A"]
    if bad:
        raise ValueError(f"non-numeric value {bad[0]!r}")
    tail = len(rest)
    if tail in (9, 5):  # root present
        root = int(rest.pop(0))
        layout = "redop+root"
    elif tail in (8, 4):
        layout = "redop" if redop != "none" else "plain"
    else:
        raise ValueError(f"unexpected number of value columns ({tail})")
    vals = rest
    oop = [_num(vals[0]), _num(vals[1]), _num(vals[2])]
    row: dict[str, Any] = {
        "size_bytes": size,
        "count": count,
        "dtype": dtype,
        "redop": redop,
        "root": root,
        "time_s": oop[0] * units.us,
        "algbw_Bps": oop[1] * units.GB,
        "busbw_Bps": oop[2] * units.GB,
    }
    if len(vals) == 8:
        ip = [_num(vals[4]), _num(vals[5]), _num(vals[6])]
        row.update(
            inplace_time_s=ip[0] * units.us,
            inplace_algbw_Bps=ip[1] * units.GB,
            inplace_busbw_Bps=ip[2] * units.GB,
        )
    if size <= 0 or oop[0] <= 0:
        raise ValueError("non-positive size or time")
    return row, layout


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def parse_nccl_tests(
    text: str, *, op: CollectiveOp | str | None = None, source: str = "<text>"
) -> NcclTestsLog:
    """Parse an nccl-tests log given as text (plain table or ``-J`` JSON).

    Examples
    --------
    >>> log = parse_nccl_tests('''
    ... #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    ...      1048576        262144     float     sum      -1    92.80   11.30   19.78      0    91.90   11.41   19.97      0
    ... ''', op="allreduce")
    >>> round(log.rows[0].time_s * 1e6, 2), log.rows[0].busbw_Bps / 1e9
    (92.8, 19.78)
    """
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _parse_json(stripped, op=op, source=source)
    op_enum = _op(op)
    rows: list[NcclTestsRow] = []
    skipped: list[SkippedLine] = []
    hosts: list[str] = []
    devices: list[str] = []
    procs: list[tuple[str, int]] = []
    ranks = 0
    avg = None
    layouts: set[str] = set()
    info: dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if op_enum is None:
            m = _BIN_RE.search(line)
            if m:
                op_enum = _OPS_BY_BINARY[m.group(1)]
        if line.startswith("#"):
            m = _RANK_RE.match(line)
            if m:
                ranks += 1
                if m.group(2) not in hosts:
                    hosts.append(m.group(2))
                pid = _PID_RE.search(line)
                if pid:
                    procs.append((m.group(2), int(pid.group(1))))
                devices.append(line.split("]")[-1].strip() if "]" in line else "")
                continue
            m = _AVG_RE.match(line)
            if m:
                avg = float(m.group(1)) * units.GB
                continue
            m = _NGPUS_RE.search(line)
            if m:
                info["ngpus_per_thread"] = int(m.group(1))
            continue
        if "NCCL INFO" in line or "NCCL WARN" in line or line.startswith("NCCL version"):
            continue
        tokens = line.split()
        if not tokens or not tokens[0].isdigit():
            continue  # launcher chatter, not a table row
        try:
            row, layout = _parse_row(tokens)
        except (ValueError, IndexError) as exc:
            skipped.append(SkippedLine(lineno, raw.rstrip(), str(exc)))
            continue
        layouts.add(layout)
        rows.append(NcclTestsRow(**row, line=lineno))
    if not rows:
        raise ParseError(
            f"{source}: no nccl-tests result row found"
            + (
                f" ({len(skipped)} malformed row(s), first at line {skipped[0].line}: {skipped[0].reason})"
                if skipped
                else ""
            ),
            value=source,
            where=source,
        )
    return NcclTestsLog(
        rows=tuple(rows),
        op=op_enum,
        ranks=ranks,
        hosts=tuple(hosts),
        devices=tuple(devices),
        avg_busbw_Bps=avg,
        skipped=tuple(skipped),
        source=source,
        layout=",".join(sorted(layouts)),
        info=info,
        rank_processes=tuple(procs) if len(procs) == ranks else (),
    )


def read_nccl_tests(path: str | Path, *, op: CollectiveOp | str | None = None) -> NcclTestsLog:
    """Read an nccl-tests log file (text or JSON); the op defaults to what the log or file name says."""
    from perfmodel._io import read_bytes

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ParseError(f"file not found: {p}", value=str(p), where=str(p))
    text = read_bytes(p).decode("utf-8", errors="replace")  # logs may hold odd host names
    op_hint = op
    if op_hint is None:
        m = re.search(
            r"(all_reduce|all_gather|reduce_scatter|broadcast|alltoall|sendrecv|reduce)", p.name
        )
        if m:
            op_hint = _OPS_BY_BINARY[m.group(1)]
    log = parse_nccl_tests(text, op=op_hint, source=str(p))
    for row in log.rows:  # a completed size always has a time; nan/inf is a broken log
        for name, t in (("time", row.time_s), ("in-place time", row.inplace_time_s)):
            if t is not None and not math.isfinite(t):
                raise ParseError(
                    f"{p}:{row.line}: {name} {t} is not a finite number; refusing the log",
                    value=t,
                    where=f"{p}:{row.line}",
                )
    return log


def _op(op: CollectiveOp | str | None) -> CollectiveOp | None:
    if op is None or isinstance(op, CollectiveOp):
        return op
    key = str(op).lower().replace("_perf", "")
    if key in _OPS_BY_BINARY:
        return _OPS_BY_BINARY[key]
    return CollectiveOp.parse(key, where="op")


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "").replace(" ", "")


def _get(d: dict[str, Any], *names: str) -> Any:
    table = {_norm(k): v for k, v in d.items()}
    for n in names:
        if _norm(n) in table:
            return table[_norm(n)]
    return None


def _parse_json(text: str, *, op: CollectiveOp | str | None, source: str) -> NcclTestsLog:
    doc = parse_json(text, source, error=ParseError)
    op_enum = _op(op)
    rows: list[NcclTestsRow] = []
    skipped: list[SkippedLine] = []
    ranks = 0

    def walk(obj: Any, path: str) -> None:
        nonlocal op_enum, ranks
        if isinstance(obj, dict):
            if op_enum is None:
                name = _get(obj, "op", "collective", "name", "test")
                if isinstance(name, str):
                    m = _BIN_RE.search(name + "_perf") or _BIN_RE.search(name)
                    if m:
                        op_enum = _OPS_BY_BINARY[m.group(1)]
            nr = _get(obj, "nranks", "ranks", "worldsize")
            if isinstance(nr, int) and nr > ranks:
                ranks = nr
            size = _get(obj, "size", "bytes", "sizebytes")
            if isinstance(size, (int, float)) and not isinstance(size, bool):
                oop = _get(obj, "outofplace", "out_of_place", "oop")
                ip = _get(obj, "inplace", "in_place", "ip")
                src = oop if isinstance(oop, dict) else obj
                t = _get(src, "time", "timeus", "time_us")
                alg = _get(src, "algbw", "alg_bw", "algbwgbps")
                bus = _get(src, "busbw", "bus_bw", "busbwgbps")
                try:
                    if t is None or float(t) <= 0 or float(size) <= 0:
                        raise ValueError("missing or non-positive time/size")
                    row: dict[str, Any] = {
                        "size_bytes": int(size),
                        "count": int(_get(obj, "count") or 0),
                        "dtype": str(_get(obj, "type", "dtype", "datatype") or ""),
                        "redop": str(_get(obj, "redop", "op_type") or "none"),
                        "root": int(_get(obj, "root") if _get(obj, "root") is not None else -1),
                        "time_s": float(t) * units.us,
                        "algbw_Bps": float(alg if alg is not None else int(size) / float(t) / 1e3)
                        * units.GB,
                        "busbw_Bps": float(bus) * units.GB if bus is not None else float("nan"),
                    }
                    if isinstance(ip, dict) and _get(ip, "time") is not None:
                        row["inplace_time_s"] = float(_get(ip, "time")) * units.us
                        if _get(ip, "algbw", "alg_bw") is not None:
                            row["inplace_algbw_Bps"] = float(_get(ip, "algbw", "alg_bw")) * units.GB
                        if _get(ip, "busbw", "bus_bw") is not None:
                            row["inplace_busbw_Bps"] = float(_get(ip, "busbw", "bus_bw")) * units.GB
                    rows.append(NcclTestsRow(**row, line=len(rows) + 1))
                except (TypeError, ValueError) as exc:
                    skipped.append(SkippedLine(len(rows) + len(skipped) + 1, path, str(exc)))
                return
            for k, v in obj.items():
                walk(v, f"{path}.{k}")
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")

    walk(doc, "$")
    if not rows:
        raise ParseError(
            f"{source}: no nccl-tests result found in the JSON", value=source, where=source
        )
    return NcclTestsLog(
        rows=tuple(rows),
        op=op_enum,
        ranks=ranks,
        skipped=tuple(skipped),
        source=source,
        layout="json",
    )


#: Catalogue system an nccl-tests log most likely ran on, by a fragment of its device names
#: (first match wins: GB200 before B200, H200 before H100).
_SYSTEM_BY_DEVICE = (
    ("GB200", "dgx-b200"),
    ("B200", "dgx-b200"),
    ("H200", "hgx-h200"),
    ("H100", "dgx-h100"),
    ("A100", "dgx-a100"),
    ("V100", "dgx1-v100"),
    ("P100", "dgx1-p100"),
)


def guess_system(devices: Sequence[str]) -> str | None:
    """The catalogue system whose GPU the log's device names show, or ``None``.

    >>> guess_system(["NVIDIA H100 80GB HBM3"])
    'dgx-h100'
    """
    dev = " ".join(devices)
    return next((name for frag, name in _SYSTEM_BY_DEVICE if frag in dev), None)


#: Shortfall of the measured bus bandwidth below the model's that counts as degraded: 25 %,
#: about twice the model's own median error on large messages over NVLink/NVSwitch/InfiniBand
#: validation rows (0.3-11 %, tests/validation/test_comm_validation.py), so that a verdict of
#: "degraded" is about the machine, not the model.
DEGRADED_SHORTFALL = 0.25


def best_time_s(row: NcclTestsRow) -> float:
    """The faster of the out-of-place and in-place times of a row (seconds)."""
    times = [t for t in (row.time_s, row.inplace_time_s) if t and t > 0]
    return min(times) if times else row.time_s


class Health(str, enum.Enum):
    """What an nccl-tests health check concluded, and the exit status ``comm --compare`` gives
    for it (:attr:`exit_status`; documented in ``docs/cli.md`` and ``docs/comm.md``)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNJUDGED = "unjudged"  # no size in the log large enough to judge

    @property
    def exit_status(self) -> int:
        """0 healthy, 3 degraded, 4 not judged (1 and 2 are taken: a closed pipe, bad input),
        so a script can act on ``comm --compare`` alone (issue 28, item 8)."""
        return {Health.HEALTHY: 0, Health.DEGRADED: 3, Health.UNJUDGED: 4}[self]


@dataclass(frozen=True)
class HealthVerdict:
    """A health check's conclusion (:class:`Health`) and its one-line explanation."""

    health: Health
    text: str

    @property
    def exit_status(self) -> int:
        return self.health.exit_status


def health_check(
    rows: Sequence[NcclTestsRow], predicted_s: Sequence[float], *, min_bytes: int = 2**20
) -> HealthVerdict:
    """A verdict on an nccl-tests log against what the hardware should give.

    For every size >= ``min_bytes`` the shortfall is ``1 - t_predicted / t_measured`` with the
    measured time the faster of the out-of-place and in-place columns (equal to
    ``1 - busbw_measured / busbw_predicted``). The machine is *degraded from size X* when every
    size >= X falls short by more than :data:`DEGRADED_SHORTFALL`; the verdict quotes the
    median shortfall over those sizes. Otherwise it is *healthy*; *unjudged* when the log has
    no size >= ``min_bytes``.

    >>> r = [NcclTestsRow(2**k, 0, "float", "sum", -1, 2e-3, 0.0, 0.0) for k in (20, 30)]
    >>> v = health_check(r, [1e-3, 1e-3])
    >>> v.health.value, v.exit_status
    ('degraded', 3)
    >>> v.text
    'verdict: DEGRADED at sizes >= 1.0 MiB: bus bandwidth 50% below what this hardware should give (median over 2 sizes)'
    >>> health_check(r, [2e-3, 1.9e-3]).text
    'verdict: healthy (sizes >= 1.0 MiB within 25% of what this hardware should give; 5% below it at 1.0 GiB)'
    >>> health_check(r[:0], []).exit_status
    4
    """
    pairs = [
        (r.size_bytes, 1.0 - p / best_time_s(r))
        for r, p in zip(rows, predicted_s)
        if r.size_bytes >= min_bytes and best_time_s(r) > 0
    ]
    if not pairs:
        return HealthVerdict(
            Health.UNJUDGED, f"verdict: no sizes >= {min_bytes / 2**20:.1f} MiB in the log to judge"
        )
    pairs.sort()
    start = None
    for i in range(len(pairs) - 1, -1, -1):
        if pairs[i][1] > DEGRADED_SHORTFALL:
            start = i
        else:
            break
    if start is not None:
        tail = [s for _, s in pairs[start:]]
        med = statistics.median(tail)
        size = pairs[start][0]
        return HealthVerdict(
            Health.DEGRADED,
            f"verdict: DEGRADED at sizes >= {_human_size(size)}: bus bandwidth {med:.0%} below "
            f"what this hardware should give (median over {len(tail)} sizes)",
        )
    j = len(pairs) - 1
    while j > 0 and pairs[j - 1][1] <= DEGRADED_SHORTFALL:
        j -= 1
    size, last = pairs[-1]
    return HealthVerdict(
        Health.HEALTHY,
        f"verdict: healthy (sizes >= {_human_size(pairs[j][0])} within "
        f"{DEGRADED_SHORTFALL:.0%} of what this hardware should give; "
        f"{abs(last):.0%} {'below' if last > 0 else 'above'} it at {_human_size(size)})",
    )


def health_verdict(
    rows: Sequence[NcclTestsRow], predicted_s: Sequence[float], *, min_bytes: int = 2**20
) -> str:
    """The text of :func:`health_check` (one line)."""
    return health_check(rows, predicted_s, min_bytes=min_bytes).text


def _human_size(nbytes: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= div:
            return f"{nbytes / div:.1f} {unit}"
    return f"{int(nbytes)} B"
