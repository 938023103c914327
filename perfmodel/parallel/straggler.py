"""Synchronisation wait: a synchronous step runs at the pace of its slowest GPU.

GPUs of one model and SKU do not run equally fast: manufacturing variability and each chip's
power management give every GPU its own sustained clock. Sinha et al., "Not All GPUs Are Created
Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems" (SC22,
arXiv:2208.11035), measured over 90% of the GPUs of Summit, Vortex, Frontera, Longhorn (V100) and
Corona (MI60) with compute-bound (SGEMM, ResNet-50) and memory-bound kernels: an average
performance variation of 8% between GPUs of one cluster (at most 22%), outliers 1.5x slower than
the median GPU aside. We read the 8% as the whisker-to-whisker span of the paper's per-GPU box
plots relative to the median (Tukey whiskers, outliers excluded) and take per-GPU speed as normal:
Tukey's whiskers of a normal sample lie at +-2.698 sigma, so sigma = 8% / 5.396 = 1.48% of the
median (:data:`PER_GPU_SPEED_CV`). Outliers are a fleet's health problem, not its norm, and are
left out.

Every data-, tensor- and pipeline-parallel step synchronises all its GPUs (the gradient
reduction, the optimizer, every tensor-parallel collective), so each step's compute ends when the
slowest of the ``n`` GPUs ends it. With per-GPU compute times ``t (1 + sigma Z_i)``, ``Z_i``
standard normal and independent, the step's compute is ``t (1 + sigma E[max_i Z_i])``: the
expected maximum of ``n`` standard normal draws, in closed form by Blom's approximation (G. Blom,
"Statistical Estimates and Transformed Beta-Variables", Wiley 1958; 4% above the exact order
statistic at ``n = 2`` (0.589 for 0.564), within 1% from ``n = 8`` on):
``E[max] ~= Phi^-1((n - 0.375) / (n + 0.25))``, 0 for one GPU, 1.43 for 8, 3.23 for 1,024, 3.96
for 16,384. The wait is charged on the compute seconds of the
critical GPU only (communication and host time do not run at the GPU's clock).

The single-GPU calibration (datasheet efficiencies, calibrated profiles) describes a typical GPU,
so one GPU is charged nothing.
"""

from __future__ import annotations

from perfmodel.errors import ConfigError
from perfmodel.order_stats import expected_max_std_normal

#: Relative standard deviation of a GPU's sustained speed within one cluster: Sinha et al. SC22
#: (arXiv:2208.11035) report an average 8% performance variation between the GPUs of one cluster;
#: read as a Tukey whisker span (+-2.698 sigma of a normal distribution): 8% / 5.396.
PER_GPU_SPEED_CV = 0.08 / (2 * 2.698)


def straggler_wait_s(compute_s: float, gpus: int, cv: float = PER_GPU_SPEED_CV) -> float:
    """Seconds a synchronous step of ``gpus`` GPUs waits for its slowest GPU, given the critical
    GPU's ``compute_s`` seconds of compute at typical speed: ``compute_s x cv x E[max of gpus]``.

    >>> round(straggler_wait_s(1.0, 8) * 1e3, 1)  # 1 s of compute on 8 GPUs: +21 ms
    21.3
    >>> straggler_wait_s(1.0, 1)
    0.0
    """
    if not compute_s >= 0:
        raise ConfigError(
            f"compute time must be >= 0 s, got {compute_s!r}", value=compute_s, where="compute_s"
        )
    if not cv >= 0:
        raise ConfigError(f"speed variation must be >= 0, got {cv!r}", value=cv, where="cv")
    return compute_s * cv * expected_max_std_normal(gpus)


__all__ = ["PER_GPU_SPEED_CV", "expected_max_std_normal", "straggler_wait_s"]
