"""The time of activation CPU offloading: where the copies to and from the host outrun the
blocks' compute they overlap (:func:`offload_stalls_s`; the lowering's
:meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.offload_wait` charges them).

Transformer Engine's ``get_cpu_offload_context`` with its default scheduling (Megatron-Core's
``cpu_offloading_num_layers``; TE ``docs/features/other_optimizations/cpu_offloading/
cpu_offloading.rst``, "Default Offloading Scheduling", NVIDIA/TransformerEngine d0067d0, 2026)
offloads the first ``n`` of ``L`` layers: each layer's saved tensors are copied to the host on
a side stream as they are saved, at most ``L - n`` layers' activations are on the GPU at any
time ("both compute and reload may be stalled to enforce this limit"), and in backward each
offloaded layer is reloaded on the side stream and must be back before its backward runs. The
copies run over the GPU's host link (NVLink-C2C on GB200/GB300, PCIe on HGX B300), one
direction per phase, beside compute: only what the schedule cannot hide is charged.

Memory: :func:`perfmodel.parallel.stage_memory.offloaded_activation_bytes`.
"""

from __future__ import annotations

from perfmodel.errors import ConfigError


def offload_stalls_s(
    blocks: int, offloaded: int, fwd_s: float, bwd_s: float, copy_s: float
) -> tuple[float, float]:
    """``(forward, backward)`` seconds one micro-batch's compute waits for the offload copies
    of ``offloaded`` of ``blocks`` identical layers (forward ``fwd_s``, backward ``bwd_s``,
    one layer's activations copied in ``copy_s`` each way).

    Forward: layer ``j`` runs after layer ``j - 1`` and, the GPU holding at most
    ``blocks - offloaded`` layers' activations, after layer ``j - (blocks - offloaded)`` has
    been copied out; layer ``i <= offloaded``'s copy starts with its forward (tensors are copied
    as they are saved), after the previous copy (one stream), and ends no earlier than its
    forward. Backward (layers in reverse): reloading layer ``k`` starts once layer
    ``k + blocks - offloaded``'s backward has freed its activations, after the previous reload,
    and layer ``k``'s backward waits for it. The stalls are the phases' ends less
    ``blocks x`` the layer times.

    >>> offload_stalls_s(5, 2, 1.0, 2.0, 0.5)  # TE's figure 3: the copies hide
    (0.0, 0.0)
    >>> offload_stalls_s(5, 3, 1.0, 1.0, 2.0)  # copies twice the compute: both phases wait
    (2.0, 3.0)
    """
    keep = blocks - offloaded
    if offloaded <= 0 or copy_s <= 0:
        return 0.0, 0.0
    if keep < 1:
        raise ConfigError(
            f"activation_offload_layers={offloaded} must be fewer than the model's {blocks} "
            "transformer blocks",
            value=offloaded,
            where="--software-option activation_offload_layers",
        )
    t = stream = 0.0
    copied: dict[int, float] = {}
    for j in range(1, blocks + 1):
        i = j - keep
        if 1 <= i <= offloaded:
            t = max(t, copied[i])
        start, t = t, t + fwd_s
        if j <= offloaded:
            stream = max(max(start, stream) + copy_s, t)
            copied[j] = stream
    fwd = t - blocks * fwd_s
    t = stream = 0.0
    back: dict[int, float] = {}
    for j in range(blocks, 0, -1):
        if j <= offloaded:
            t = max(t, back[j])
        t += bwd_s
        k = j - keep
        if 1 <= k <= offloaded:
            stream = max(t, stream) + copy_s
            back[k] = stream
    bwd = t - blocks * bwd_s
    # a copy that hides leaves the phase's end as the sum of the layer times, up to rounding
    fwd = fwd if fwd > _ROUNDING * blocks * fwd_s else 0.0
    bwd = bwd if bwd > _ROUNDING * blocks * bwd_s else 0.0
    return fwd, bwd


#: Relative rounding of a phase's summed layer times below which a stall is none (float sums
#: of ``blocks`` terms; 1e-9 is far above their error and far below any real wait).
_ROUNDING = 1e-9


__all__ = ["offload_stalls_s"]
