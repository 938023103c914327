"""What a training run really costs: energy per step, cost and energy per million tokens, and the
wall-clock time of a token budget once failures, checkpoints and restarts are paid for.

Power (:class:`PowerModel`)
    A GPU board draws ``P(u) = P_idle + (P_load - P_idle) * u``, linear in the share ``u`` of the
    step its compute stream is busy (the linear server power model of Fan, Weber & Barroso,
    "Power Provisioning for a Warehouse-sized Computer", ISCA 2007, applied to one GPU
    board). ``P_load`` is the board power the GPU's sustained GEMM rates were measured at
    (``sustained_power_W`` in ``hardware/gpus.toml``; dense GEMMs hold a board at its power
    limit: stas00/ml-engineering commit 0359db8, "Maximum Achievable and Sustainable Matmul
    FLOPS"), else its datasheet TDP. ``P_idle`` is the catalogue's ``idle_W``, else
    :data:`IDLE_FRACTION_OF_TDP` of the TDP. Assumptions, each stated in the output: every GPU
    draws what the critical GPU draws (a less busy pipeline stage draws less: an upper bound);
    exposed communication, bubbles and host waits draw idle power (NCCL kernels draw a little
    more: a lower bound); every compute kernel draws load power (memory-bound kernels draw less:
    an upper bound); GPU boards only, no CPUs, NICs, switches or cooling (an 8-GPU H100 node was
    measured at up to 8.4 kW against 5.6 kW of GPU TDP: Latif et al., "Single-Node Power Demand
    During AI Training", IEEE Access 13, 2025).

Failures (:class:`Reliability`)
    Interruptions arrive as a Poisson process whose rate is the sum of a rate per GPU and a rate
    per server (node): ``1 / M = n_gpu / MTBF_gpu + n_node / MTBF_node``, ``M`` the job's mean
    time between interruptions. Defaults from the Llama 3 405B pre-training run (Dubey et al.,
    "The Llama 3 Herd of Models", arXiv:2407.21783, 2024, section 3.3.4, Table 5): 419
    unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs in 2,048 servers of eight
    (section 3.3.1); the Table 5 rows of category "GPU" (faulty GPU 148, HBM3 72, SRAM 19, GPU
    system processor 17, silent data corruption 6, thermal interface and sensor 6: 268) are
    charged per GPU, the other 151 (software, network, host, maintenance, unknown) per server.
    The 47 planned interruptions are not failures and are left out. The rates are an H100
    fleet's, applied to every GPU (no other published run breaks its failures down this way).

Checkpoints (:class:`Storage`) and the interval (:func:`daly_interval_s`)
    A checkpoint holds the weights, the optimizer's master copy (if any) and the optimizer state (not the
    gradients): ``parameters * (param_bytes + master_bytes + optimizer state bytes)``, 14 bytes
    per parameter for BF16 with Adam. Saving blocks training for ``bytes / write bandwidth``
    (synchronous save: torchtitan's ``checkpoint.async_mode`` defaults to ``"disabled"``,
    ``torchtitan/config/job_config.py``; Megatron-LM's ``--async-save`` is off by default).
    The storage bandwidth defaults to the "Better" column of NVIDIA's DGX SuperPOD storage
    guidelines (RA-11333-001 V11, 2023-09-22, Table 6): 4 GB/s write and 8 GB/s read per
    8-GPU server, 20 GB/s write and 40 GB/s read per scalable unit of 32 servers (256 GPUs),
    whichever is less. A restart costs a relaunch (:data:`RESTART_OVERHEAD_S`) plus reading the
    checkpoint back. The compute time between checkpoints that minimises the expected wall-clock
    time is Daly's higher-order estimate (J. T. Daly, "A higher order estimate of the optimum
    checkpoint interval for restart dumps", Future Generation Computer Systems 22(3), 2006),
    which refines Young's ``sqrt(2 delta M)`` (J. W. Young, "A first order approximation to the
    optimum checkpoint interval", CACM 17(9), 1974); the expected wall-clock time is Daly's
    complete model for Poisson interruptions::

        T_w = M exp(R / M) (exp((tau + delta) / M) - 1) T_s / tau

    with ``T_s`` the failure-free time, ``tau`` the interval (a whole number of steps),
    ``delta`` the save time and ``R`` the restart time. Goodput is ``T_s / T_w``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfmodel.errors import ConfigError
from perfmodel.units import GB, hour, minute

if TYPE_CHECKING:
    from perfmodel.hardware.gpus import GPUSpec
    from perfmodel.report.step import RunSpan

# ---------------------------------------------------------------------------------- constants

#: Llama 3 405B pre-training snapshot (Dubey et al. 2024, section 3.3.4 and Table 5): GPUs,
#: servers of eight GPUs (section 3.3.1), days, and unexpected interruptions by Table 5 category.
LLAMA3_GPUS = 16_384
LLAMA3_SERVERS = 2_048
LLAMA3_DAYS = 54.0
LLAMA3_UNEXPECTED = 419
LLAMA3_GPU_CATEGORY = 148 + 72 + 19 + 17 + 6 + 6
"""Table 5 rows of category "GPU": faulty GPU, HBM3, SRAM, GPU system processor, silent data
corruption, thermal interface and sensor (268; the paper's text says GPU issues are 58.7% of the
419, the table's GPU rows add up to 64.0%: the table is used)."""

#: Mean GPU-hours between interruptions charged per GPU: 16,384 GPUs x 54 days / 268 (79,230 h).
MTBF_GPU_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24.0 / LLAMA3_GPU_CATEGORY
#: Mean server-hours between interruptions charged per server: 2,048 x 54 days / 151 (17,577 h).
MTBF_NODE_HOURS = LLAMA3_SERVERS * LLAMA3_DAYS * 24.0 / (LLAMA3_UNEXPECTED - LLAMA3_GPU_CATEGORY)
RELIABILITY_SOURCE = (
    "Llama 3 405B pre-training (Dubey et al. 2024, arXiv:2407.21783, Table 5): 419 unexpected "
    "interruptions in 54 days on 16,384 H100; GPU rows per GPU, the rest per host"
)

#: Idle board power as a share of TDP for a GPU whose catalogue entry states no ``idle_W``:
#: the H100 SXM entry's ESTIMATE of 88 W idle against 700 W TDP (``hardware/gpus.toml``, whose
#: ``achieved`` source gives its basis). It weighs only the idle share of a step.
IDLE_FRACTION_OF_TDP = 88.0 / 700.0

#: DGX SuperPOD storage guidelines, "Better" column (NVIDIA RA-11333-001 V11, 2023-09-22,
#: Table 6), per 8-GPU server and per scalable unit of 32 servers (256 GPUs), bytes/s.
STORAGE_WRITE_PER_SERVER_BPS = 4.0 * GB
STORAGE_READ_PER_SERVER_BPS = 8.0 * GB
STORAGE_WRITE_PER_SU_BPS = 20.0 * GB
STORAGE_READ_PER_SU_BPS = 40.0 * GB
STORAGE_GPUS_PER_SERVER = 8
STORAGE_GPUS_PER_SU = 256
STORAGE_SOURCE = (
    "DGX SuperPOD storage guidelines, 'Better' (NVIDIA RA-11333-001 V11, Table 6): 4/8 GB/s "
    "write/read per 8-GPU server, 20/40 GB/s per 256-GPU scalable unit"
)

#: Relaunch time of a restart before the checkpoint is read (scheduling, process start, NCCL
#: initialisation, warm-up): an ESTIMATE, the restart time of Daly's (2006) worked examples
#: (Figs. 3-5: R = 10 min), not a measurement of any framework; ``--restart-s`` sets it.
RESTART_OVERHEAD_S = 10.0 * minute

#: Joules per kilowatt-hour.
J_PER_KWH = 3.6e6


def _positive(value: float, name: str, where: str) -> float:
    """``value`` as a float if it is a finite number > 0, else a :class:`ConfigError`."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value > 0):
        raise ConfigError(
            f"{name} must be a positive number, got {value!r}", value=value, where=where
        )
    return float(value)


# -------------------------------------------------------------------------------------- power


@dataclass(frozen=True)
class PowerModel:
    """Board power of one GPU as a function of how busy its compute stream is.

    Examples
    --------
    >>> PowerModel("H100", load_w=700.0, idle_w=88.0).power_w(0.5)
    394.0
    """

    gpu: str
    load_w: float
    idle_w: float
    load_basis: str = "datasheet TDP"
    idle_basis: str = "catalogue idle_W"

    def __post_init__(self) -> None:
        _positive(self.load_w, "load power (W)", f"gpu {self.gpu}")
        if not (math.isfinite(self.idle_w) and 0 <= self.idle_w <= self.load_w):
            raise ConfigError(
                f"GPU {self.gpu}: idle power {self.idle_w} W must be in [0, {self.load_w}] W",
                value=self.idle_w,
                where=f"gpu {self.gpu}",
            )

    def power_w(self, busy_fraction: float) -> float:
        """``idle_w + (load_w - idle_w) * u``, ``u`` clipped to ``[0, 1]`` (watts)."""
        u = min(max(float(busy_fraction), 0.0), 1.0)
        return self.idle_w + (self.load_w - self.idle_w) * u

    @classmethod
    def of(cls, spec: GPUSpec) -> PowerModel | None:
        """The power model of a catalogue GPU; ``None`` when it has no TDP (a calibrated CPU)."""
        if spec.tdp_w is None:
            return None
        if spec.sustained_power_w is not None:
            load, basis = float(spec.sustained_power_w), "board power of its sustained GEMM rates"
            load = min(load, float(spec.tdp_w))  # a board capped below the measurement
        else:
            load, basis = float(spec.tdp_w), "datasheet TDP"
        if spec.idle_w is not None:
            idle, ibasis = float(spec.idle_w), "catalogue idle_W"
        else:
            idle = IDLE_FRACTION_OF_TDP * float(spec.tdp_w)
            ibasis = f"{IDLE_FRACTION_OF_TDP:.1%} of TDP (the H100 entry's idle estimate)"
        return cls(spec.name, load, min(idle, load), basis, ibasis)


@dataclass(frozen=True)
class StepEnergy:
    """Energy of one training step on all GPUs, and per million tokens.

    ``energy_per_step_j = num_gpus * power_per_gpu_w * iteration_time_s``.
    """

    num_gpus: int
    iteration_time_s: float
    busy_fraction: float
    power_per_gpu_w: float
    power: PowerModel
    tokens_per_step: float | None

    @property
    def energy_per_step_j(self) -> float:
        return self.num_gpus * self.power_per_gpu_w * self.iteration_time_s

    @property
    def energy_per_million_tokens_j(self) -> float | None:
        if not self.tokens_per_step:
            return None
        return self.energy_per_step_j / self.tokens_per_step * 1e6

    @property
    def kwh_per_million_tokens(self) -> float | None:
        e = self.energy_per_million_tokens_j
        return None if e is None else e / J_PER_KWH

    def to_dict(self) -> dict[str, Any]:
        return {
            "busy_fraction": self.busy_fraction,
            "power_per_gpu_w": self.power_per_gpu_w,
            "load_power_w": self.power.load_w,
            "load_power_basis": self.power.load_basis,
            "idle_power_w": self.power.idle_w,
            "idle_power_basis": self.power.idle_basis,
            "energy_per_step_j": self.energy_per_step_j,
            "energy_per_million_tokens_j": self.energy_per_million_tokens_j,
            "kwh_per_million_tokens": self.kwh_per_million_tokens,
            "scope": "GPU boards only",
        }


def energy_at_step_time(e: StepEnergy, iteration_time_s: float, *, busy_share: float) -> float:
    """Joules of one step (all GPUs) had it taken ``iteration_time_s`` instead of
    ``e.iteration_time_s``, the power model evaluated there, with ``busy_share`` of the
    difference in the compute stream's busy seconds and the rest in its idle seconds (exposed
    communication, bubbles, host waits): ``busy' = busy + busy_share * (t' - t)``, then kept
    within ``[0, t']`` with ``idle' >= 0`` (a shorter step that runs out of idle seconds loses
    busy ones, and the reverse)."""
    t, d = e.iteration_time_s, iteration_time_s - e.iteration_time_s
    busy = e.busy_fraction * t
    idle = t - busy
    busy_new = busy + busy_share * d
    idle_new = idle + (1.0 - busy_share) * d
    if idle_new < 0:  # the idle seconds ran out: the rest of the cut is busy seconds
        busy_new += idle_new
    if busy_new < 0:
        busy_new = 0.0
    busy_new = min(busy_new, iteration_time_s)
    return e.num_gpus * e.power.power_w(busy_new / iteration_time_s) * iteration_time_s


def energy_range(e: StepEnergy, t_lo_s: float, t_hi_s: float) -> tuple[float, float]:
    """``(low, high)`` joules of one step when the step takes ``t_lo_s`` to ``t_hi_s`` (the step
    time's range): the least and the most of :func:`energy_at_step_time` over that range with
    any share of the miss in busy or idle seconds (where it lies, the interval does not say).
    The power model being linear in the busy seconds with load power at least idle power, a
    step's least energy at a given time puts the seconds it saves in busy ones and the seconds
    it adds in idle ones, its most the reverse, and both grow with the step time; so the ends
    are ``t_lo_s`` and ``t_hi_s`` with the miss all busy where that end lies on its usual side
    of the point estimate (``t_lo_s <= t <= t_hi_s``: the point estimate minus or plus the
    missed seconds at load power, down to idle power) and all idle where a biased range lies
    wholly on one side of it. A slower step's energy thus grows faster than its time when the
    compute is what ran slow, and a time's scaling
    (:meth:`perfmodel.intervals.answers.StepInterval.run_range`) would understate it.

    >>> from perfmodel.hardware import get_gpu
    >>> e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=1.5)
    >>> [round(v) for v in energy_range(e, 1.0, 4.0)]  # 8 x (88 x 1 + 612 x 0.5); 8,752 + 8 x 700 x 2
    [3152, 19952]
    """
    t = e.iteration_time_s
    low = energy_at_step_time(e, t_lo_s, busy_share=1.0 if t_lo_s <= t else 0.0)
    high = energy_at_step_time(e, t_hi_s, busy_share=1.0 if t_hi_s >= t else 0.0)
    return low, high


def kwh_per_million_tokens_range(
    e: StepEnergy, t_lo_s: float, t_hi_s: float
) -> tuple[float, float] | None:
    """``(low, high)`` GPU-board kWh of a million tokens when the step takes ``t_lo_s`` to
    ``t_hi_s``: :func:`energy_range` of the step over its tokens (a step's tokens do not
    change with its time), ``low_j / tokens_per_step * 1e6 / J_PER_KWH``; ``None`` for a model
    without tokens.

    >>> from perfmodel.hardware import get_gpu
    >>> e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=1.5,
    ...                 tokens_per_step=1e6)
    >>> [round(v, 5) for v in kwh_per_million_tokens_range(e, 1.0, 4.0)]  # 3,152 J, 19,952 J
    [0.00088, 0.00554]
    """
    if not e.tokens_per_step:
        return None
    lo, hi = energy_range(e, t_lo_s, t_hi_s)
    per = 1e6 / e.tokens_per_step / J_PER_KWH
    return lo * per, hi * per


def step_energy(
    spec: GPUSpec,
    *,
    num_gpus: int,
    iteration_time_s: float,
    busy_s: float,
    tokens_per_step: float | None = None,
) -> StepEnergy | None:
    """Energy of a step whose critical GPU's compute stream is busy ``busy_s`` of
    ``iteration_time_s`` (compute plus optimizer seconds of the breakdown); ``None`` when the
    GPU has no TDP.

    >>> from perfmodel.hardware import get_gpu
    >>> e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=1.5)
    >>> round(e.power_per_gpu_w, 1), round(e.energy_per_step_j)  # 88 + 612 * 0.75 W, x 8 x 2 s
    (547.0, 8752)
    """
    pm = PowerModel.of(spec)
    if pm is None or not iteration_time_s > 0:
        return None
    u = min(max(busy_s / iteration_time_s, 0.0), 1.0)
    return StepEnergy(num_gpus, iteration_time_s, u, pm.power_w(u), pm, tokens_per_step)


# ----------------------------------------------------------------------------------- failures


@dataclass(frozen=True)
class Reliability:
    """Mean hours between job interruptions charged per GPU and per server (node).

    >>> round(Reliability().job_mtbf_s(16_384, 2_048) / 3600, 2)  # Llama 3: 419 in 54 days
    3.09
    """

    mtbf_gpu_hours: float = MTBF_GPU_HOURS
    mtbf_node_hours: float = MTBF_NODE_HOURS
    source: str = RELIABILITY_SOURCE

    def __post_init__(self) -> None:
        _positive(self.mtbf_gpu_hours, "MTBF per GPU (hours)", "--mtbf-gpu-hours")
        _positive(self.mtbf_node_hours, "MTBF per node (hours)", "--mtbf-node-hours")

    def job_mtbf_s(self, gpus: int, nodes: int) -> float:
        """``1 / (gpus / MTBF_gpu + nodes / MTBF_node)`` in seconds."""
        rate_per_h = gpus / self.mtbf_gpu_hours + nodes / self.mtbf_node_hours
        return hour / rate_per_h


# ------------------------------------------------------------------------------- checkpoints


def default_write_Bps(gpus: int) -> float:
    """Aggregate checkpoint write bandwidth of ``gpus`` GPUs, bytes/s (:data:`STORAGE_SOURCE`).

    >>> default_write_Bps(8) / 1e9, default_write_Bps(64) / 1e9, default_write_Bps(16384) / 1e9
    (4.0, 20.0, 1280.0)
    """
    servers = math.ceil(gpus / STORAGE_GPUS_PER_SERVER)
    units = math.ceil(gpus / STORAGE_GPUS_PER_SU)
    return min(servers * STORAGE_WRITE_PER_SERVER_BPS, units * STORAGE_WRITE_PER_SU_BPS)


def default_read_Bps(gpus: int) -> float:
    """Aggregate checkpoint read bandwidth of ``gpus`` GPUs, bytes/s (:data:`STORAGE_SOURCE`)."""
    servers = math.ceil(gpus / STORAGE_GPUS_PER_SERVER)
    units = math.ceil(gpus / STORAGE_GPUS_PER_SU)
    return min(servers * STORAGE_READ_PER_SERVER_BPS, units * STORAGE_READ_PER_SU_BPS)


@dataclass(frozen=True)
class Storage:
    """Where checkpoints go: aggregate write and read bandwidth (bytes/s; ``None``: the
    SuperPOD default for the job's GPU count), the relaunch time of a restart, and an optional
    blocking save time that replaces ``bytes / write bandwidth`` (an asynchronous save)."""

    write_Bps: float | None = None
    read_Bps: float | None = None
    restart_overhead_s: float = RESTART_OVERHEAD_S
    save_s: float | None = None

    def __post_init__(self) -> None:
        if self.write_Bps is not None:
            _positive(self.write_Bps, "storage write bandwidth", "--storage-write-GBps")
        if self.read_Bps is not None:
            _positive(self.read_Bps, "storage read bandwidth", "--storage-read-GBps")
        if not (
            isinstance(self.restart_overhead_s, int | float)
            and math.isfinite(self.restart_overhead_s)
            and self.restart_overhead_s >= 0
        ):
            raise ConfigError(
                f"restart time must be >= 0 s, got {self.restart_overhead_s!r}",
                value=self.restart_overhead_s,
                where="--restart-s",
            )
        if self.save_s is not None:
            _positive(self.save_s, "checkpoint save time (s)", "--checkpoint-save-s")

    def describe(self) -> str:
        """Where the bandwidths and restart time come from (the defaults' source or "given")."""
        given = [
            name
            for name, v in (
                ("write", self.write_Bps),
                ("read", self.read_Bps),
                ("save time", self.save_s),
            )
            if v is not None
        ]
        if self.restart_overhead_s != RESTART_OVERHEAD_S:
            given.append("restart")
        base = STORAGE_SOURCE + "; restart 10 min relaunch (ESTIMATE) + read"
        return base if not given else f"{', '.join(given)} given; otherwise {base}"

    def write_for(self, gpus: int) -> float:
        return self.write_Bps if self.write_Bps is not None else default_write_Bps(gpus)

    def read_for(self, gpus: int) -> float:
        return self.read_Bps if self.read_Bps is not None else default_read_Bps(gpus)


def young_interval_s(save_s: float, mtbf_s: float) -> float:
    """Young's (1974) first-order optimum compute time between checkpoints, ``sqrt(2 delta M)``.

    >>> young_interval_s(300.0, 86400.0) / 60
    120.0
    """
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval_s(save_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum compute time between checkpoints::

        tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta   (delta < 2M)
        tau = M                                                                      (otherwise)

    His worked examples (Figs. 3-5: delta = 5 min, M = 24 h, 6 h and 15 min) give 117, 57 and
    9.1 minutes:

    >>> [round(daly_interval_s(300.0, m) / 60, 1) for m in (86400.0, 21600.0, 900.0)]
    [116.7, 56.7, 9.1]
    """
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def daly_wall_time_s(
    solve_s: float, interval_s: float, save_s: float, restart_s: float, mtbf_s: float
) -> float:
    """Expected wall-clock time of ``solve_s`` failure-free seconds checkpointed every
    ``interval_s`` compute seconds (Daly 2006, the complete model)::

        T_w = M exp(R / M) (exp((tau + delta) / M) - 1) T_s / tau

    ``inf`` when the exponent overflows (the job would practically never finish).

    >>> round(daly_wall_time_s(500 * 3600.0, 7020.0, 300.0, 600.0, 86400.0) / 3600, 1)
    547.9
    """
    a = (interval_s + save_s) / mtbf_s
    b = restart_s / mtbf_s
    if a + b > 700.0:
        return math.inf
    return mtbf_s * math.exp(b) * math.expm1(a) * solve_s / interval_s


# ------------------------------------------------------------------------------------ the run


@dataclass(frozen=True)
class Goodput:
    """The wall-clock time of a run once interruptions are paid for (seconds).

    ``goodput = ideal_s / wall_s``; ``expected_interruptions = wall_s / job_mtbf_s``.
    """

    ideal_s: float
    wall_s: float
    job_mtbf_s: float
    interval_s: float
    interval_steps: int
    optimal_interval_s: float
    young_interval_s: float
    save_s: float
    restart_s: float
    load_s: float
    checkpoint_bytes: float
    write_Bps: float
    read_Bps: float
    gpus: int
    nodes: int
    reliability: Reliability = field(default_factory=Reliability)
    interval_given: bool = False
    storage_source: str = STORAGE_SOURCE

    @property
    def goodput(self) -> float:
        return self.ideal_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def expected_interruptions(self) -> float:
        return self.wall_s / self.job_mtbf_s

    @property
    def checkpoints(self) -> float:
        """Checkpoints saved over the run (``ideal_s / interval_s``, whole)."""
        return math.floor(self.ideal_s / self.interval_s) if self.interval_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ideal_time_s": self.ideal_s,
            "wall_clock_s": self.wall_s,
            "goodput": self.goodput,
            "job_mtbf_s": self.job_mtbf_s,
            "expected_interruptions": self.expected_interruptions,
            "checkpoint_interval_s": self.interval_s,
            "checkpoint_interval_steps": self.interval_steps,
            "checkpoint_interval_given": self.interval_given,
            "optimal_interval_s": self.optimal_interval_s,
            "young_interval_s": self.young_interval_s,
            "checkpoint_bytes": self.checkpoint_bytes,
            "checkpoint_save_s": self.save_s,
            "restart_s": self.restart_s,
            "checkpoint_load_s": self.load_s,
            "storage_write_Bps": self.write_Bps,
            "storage_read_Bps": self.read_Bps,
            "mtbf_gpu_hours": self.reliability.mtbf_gpu_hours,
            "mtbf_node_hours": self.reliability.mtbf_node_hours,
            "reliability_source": self.reliability.source,
            "storage_source": self.storage_source,
        }


def goodput(
    *,
    ideal_s: float,
    step_s: float,
    gpus: int,
    nodes: int,
    checkpoint_bytes: float,
    reliability: Reliability | None = None,
    storage: Storage | None = None,
    interval_s: float | None = None,
) -> Goodput:
    """Expected wall-clock time of a run of ``ideal_s`` failure-free seconds (steps of
    ``step_s``) on ``gpus`` GPUs in ``nodes`` servers, checkpointing ``checkpoint_bytes``.

    The interval is Daly's optimum rounded to whole steps (at least one, at most the run), or
    ``interval_s`` when given (also rounded to whole steps).

    Raises
    ------
    ConfigError
        A non-positive time, size, count or interval.
    """
    rel = reliability or Reliability()
    sto = storage or Storage()
    _positive(ideal_s, "ideal time (s)", "goodput")
    _positive(step_s, "step time (s)", "goodput")
    _positive(checkpoint_bytes, "checkpoint size (bytes)", "goodput")
    if interval_s is not None:
        _positive(interval_s, "checkpoint interval (s)", "--checkpoint-interval-s")
    w, r = sto.write_for(gpus), sto.read_for(gpus)
    save = sto.save_s if sto.save_s is not None else checkpoint_bytes / w
    load = checkpoint_bytes / r
    restart = sto.restart_overhead_s + load
    m = rel.job_mtbf_s(gpus, nodes)
    best = daly_interval_s(save, m)
    want = best if interval_s is None else float(interval_s)
    steps = max(1, round(want / step_s))
    tau = min(steps * step_s, ideal_s)
    steps = max(1, round(tau / step_s))
    wall = daly_wall_time_s(ideal_s, tau, save, restart, m)
    return Goodput(
        ideal_s=ideal_s,
        wall_s=wall,
        job_mtbf_s=m,
        interval_s=tau,
        interval_steps=steps,
        optimal_interval_s=best,
        young_interval_s=young_interval_s(save, m),
        save_s=save,
        restart_s=restart,
        load_s=load,
        checkpoint_bytes=checkpoint_bytes,
        write_Bps=w,
        read_Bps=r,
        gpus=gpus,
        nodes=nodes,
        reliability=rel,
        interval_given=interval_s is not None,
        storage_source=sto.describe(),
    )


@dataclass(frozen=True)
class RunEstimate:
    """A token budget's energy, cost and goodput (the ``--tokens`` output beyond the ideal
    time of :class:`~perfmodel.report.step.TokenBudget`)."""

    tokens: float
    goodput: Goodput
    energy: StepEnergy | None
    steps: int
    price_per_gpu_hour: float | None = None
    price_source: str = ""

    @property
    def cost_ideal(self) -> float | None:
        p = self.price_per_gpu_hour
        return None if p is None else p * self.goodput.gpus * self.goodput.ideal_s / hour

    @property
    def cost_wall(self) -> float | None:
        p = self.price_per_gpu_hour
        if p is None or not math.isfinite(self.goodput.wall_s):
            return None
        return p * self.goodput.gpus * self.goodput.wall_s / hour

    @property
    def cost_per_million_tokens(self) -> float | None:
        """Failure-free cost of a million tokens (the hardware comparison's number)."""
        c = self.cost_ideal
        return None if c is None else c / self.tokens * 1e6

    @property
    def energy_ideal_j(self) -> float | None:
        e = self.energy
        return None if e is None else e.energy_per_step_j * self.steps

    @property
    def energy_wall_j(self) -> float | None:
        """The step's average power over the whole wall clock (lost work, saves and restarts
        included at that power: an upper bound)."""
        e = self.energy
        if e is None or not math.isfinite(self.goodput.wall_s):
            return None
        return e.num_gpus * e.power_per_gpu_w * self.goodput.wall_s

    def energy_ranges(self, span: RunSpan) -> dict[str, float]:
        """``energy_ideal_j_low`` / ``_high`` and ``energy_wall_clock_j_low`` / ``_high`` under
        the step time's range ``span`` (:func:`energy_range` of the step, times the steps, and
        times the wall clock's own range over the step time); empty without an energy."""
        if self.energy is None:
            return {}
        return self._step_and_run_energy_ranges(self.energy, span)[1]

    def _step_and_run_energy_ranges(
        self, e: StepEnergy, span: RunSpan
    ) -> tuple[tuple[float, float], dict[str, float]]:
        """``((low, high) joules of one step, energy_ranges)``: the step's
        :func:`energy_range` computed once for both."""
        t_lo, t_hi = span.run_range(e.iteration_time_s)
        lo, hi = energy_range(e, t_lo, t_hi)
        out = {"energy_ideal_j_low": lo * self.steps, "energy_ideal_j_high": hi * self.steps}
        if self.energy_wall_j is not None:
            # the wall clock scales with the step time (Daly, at the fixed interval): the run's
            # energy is the step's energy at that step time per step second, over the wall clock
            w_lo, w_hi = span.run_range(self.goodput.wall_s)
            out["energy_wall_clock_j_low"] = lo / t_lo * w_lo
            out["energy_wall_clock_j_high"] = hi / t_hi * w_hi
        return (lo, hi), out

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            **self.goodput.to_dict(),
            "energy": None if self.energy is None else self.energy.to_dict(),
            "energy_ideal_j": self.energy_ideal_j,
            "energy_wall_clock_j": self.energy_wall_j,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "price_source": self.price_source or None,
            "cost_ideal": self.cost_ideal,
            "cost_wall_clock": self.cost_wall,
            "cost_per_million_tokens": self.cost_per_million_tokens,
        }

    def format_lines(self, span: RunSpan | None = None) -> list[str]:
        """The ``--tokens`` lines after the ideal time (docs/predict.md, "Goodput"); with
        ``span`` (the step time's interval) the wall-clock time and the cost with failures are
        followed by their ranges (:meth:`perfmodel.intervals.answers.StepInterval.run_range`: both are
        proportional to the step time at Daly's checkpoint interval)."""
        from perfmodel.units import format_duration

        g = self.goodput
        w = g.wall_s
        lines = [
            f"interruptions   {g.expected_interruptions:,.1f} expected (job MTBF "
            f"{format_duration(g.job_mtbf_s)}: {g.gpus:,} GPUs / {g.reliability.mtbf_gpu_hours:,.0f} h"
            f" + {g.nodes:,} hosts / {g.reliability.mtbf_node_hours:,.0f} h)",
            f"checkpoints     every {format_duration(g.interval_s)} ({g.interval_steps:,} steps"
            + (
                f"; given, Daly's optimum {format_duration(g.optimal_interval_s)}"
                if g.interval_given
                else ", Daly's optimum"
            )
            + f"): {g.checkpoint_bytes / 1e12:,.3g} TB each, a save blocks "
            f"{format_duration(g.save_s)}, a restart {format_duration(g.restart_s)}",
            f"goodput         {100 * g.goodput:.1f}%  wall-clock "
            + (f"{w / 86400:,.2f} days ({format_duration(w)})" if math.isfinite(w) else "never")
            + f" vs {g.ideal_s / 86400:,.2f} days failure-free",
        ]
        if span is not None and math.isfinite(w):
            lo, hi = span.run_range(w)
            lines.append(
                f"  {span.level_text + ' range':<14}wall-clock {lo / 86400:,.2f} - "
                f"{hi / 86400:,.2f} days"
            )
        e = self.energy
        if e is not None:
            kwh = e.kwh_per_million_tokens
            lines.append(
                f"energy          {e.energy_per_step_j / 1e3:,.1f} kJ per step "
                f"({e.power_per_gpu_w:,.0f} W per GPU at {100 * e.busy_fraction:.0f}% busy)"
                + (f", {kwh:,.3g} kWh per million tokens" if kwh is not None else "")
                + (
                    f"; run {self.energy_wall_j / J_PER_KWH / 1e3:,.1f} MWh"
                    if self.energy_wall_j is not None
                    else ""
                )
                + " (GPU boards only)"
            )
            if span is not None:
                per, rng = self._step_and_run_energy_ranges(e, span)
                lines.append(
                    f"  {span.level_text + ' range':<14}{per[0] / 1e3:,.1f} - {per[1] / 1e3:,.1f}"
                    " kJ per step"
                    + (
                        f"; run {rng['energy_wall_clock_j_low'] / J_PER_KWH / 1e3:,.1f} - "
                        f"{rng['energy_wall_clock_j_high'] / J_PER_KWH / 1e3:,.1f} MWh"
                        if "energy_wall_clock_j_low" in rng
                        else ""
                    )
                    + " (the power model at the step range's ends)"
                )
        if self.cost_wall is not None and self.cost_per_million_tokens is not None:
            lines.append(
                f"cost            {self.cost_wall:,.2f} with failures ({self.cost_ideal:,.2f} "
                f"failure-free; {self.cost_per_million_tokens:,.4g} per million tokens)"
            )
            if span is not None:
                (lo, hi), (m_lo, m_hi) = (
                    span.run_range(self.cost_wall),
                    span.run_range(self.cost_per_million_tokens),
                )
                lines.append(
                    f"  {span.level_text + ' range':<14}{lo:,.2f} - {hi:,.2f} with failures "
                    f"({m_lo:,.4g} - {m_hi:,.4g} per million tokens)"
                )
        lines.append(
            "  sources: failures "
            + g.reliability.source
            + "; interval Daly 2006; storage "
            + g.storage_source
            + "; docs/predict.md 'Goodput'"
        )
        return lines


__all__ = [
    "IDLE_FRACTION_OF_TDP",
    "MTBF_GPU_HOURS",
    "MTBF_NODE_HOURS",
    "RESTART_OVERHEAD_S",
    "Goodput",
    "PowerModel",
    "Reliability",
    "RunEstimate",
    "StepEnergy",
    "Storage",
    "daly_interval_s",
    "daly_wall_time_s",
    "default_read_Bps",
    "default_write_Bps",
    "goodput",
    "kwh_per_million_tokens_range",
    "step_energy",
    "young_interval_s",
]
