"""Fused-attention efficiency per kernel backend, head dimension, sequence length and mask.

A fused attention kernel (FlashAttention and its successors) reaches a fraction of the tensor-core
peak that depends on the kernel library, the GPU generation, the head dimension, the sequence
length and the causal mask. This module holds that fraction as published kernel benchmarks state
it, and the rules that decide which kernel a software stack runs.

Efficiency here is ``achieved FLOP/s / dense datasheet peak`` of the attention's matmul format
(BF16/FP16), with FLOP counted the FlashAttention way (forward ``4 s_q s_kv h d``, halved under a
causal mask; backward 2.5x forward), the convention of :meth:`perfmodel.workload._net.Net.attention`,
so a kernel's published TFLOP/s divides by the peak directly.

Sources (numbers read off the bar labels of the figures):

* Hopper (H100 SXM5, 989.4 TFLOP/s BF16): Shah, Bikshandi, Zhang, Thakkar, Ramani & Dao,
  "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision" (arXiv
  2407.08608, 2024), Figure 5 (forward, BF16, head dimension 64/128/256, with and without the
  causal mask, sequence 512-16k at 16k tokens per batch, FlashAttention-2 2.5.x, cuDNN 9.x,
  FlashAttention-3) and Figure 6 (backward, without mask, head dimension 64/128).
* Ampere (A100): Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
  Partitioning" (arXiv 2307.08691, 2023), abstract and section 4.1: the forward reaches up to 73%
  and the backward up to 63% of the A100's peak. The FlashAttention-2 kernels are the same
  (sm80) code on Hopper, so their Hopper curve, normalised to its own maximum, gives the shape
  in head dimension, length and mask (an assumption, stated where used).
* Data-centre Blackwell (GB200, compute capability 10.0; GB300, 10.3): NVIDIA's cuDNN frontend
  training benchmark, ``benchmark/sdpa_benchmark_training/results/`` at NVIDIA/cudnn-frontend
  @3929da2 (cuDNN 9.22, BF16; CSV columns, not figures): forward and backward, with and
  without the causal mask, 2k-32k tokens, head dimension 128 (Llama 3.1) and 192/128
  (DeepSeek-V3's MLA). Its FLOP count is this module's (causal pairs ``s (s + 1) / 2``
  against ``s^2 / 2``: under 0.05% at 2k); its MLA backward counts ``3 d_qk + 2 d_vo`` per
  pair and head, converted to 2.5x the forward. Head dimension 64 is not in it: head dimension
  128's times the Hopper cuDNN curve's 64/128 ratio (an assumption, stated where used).
  Like the Hopper figures these are short (10-iteration) kernel runs, not power-settled.

Where a figure is missing, the gap is filled by a stated rule: the causal forward at head
dimension 64 takes the causal/non-causal ratio of head dimension 128; the causal backward takes
the forward's causal/non-causal ratio at the same head dimension and length (FlashAttention-3
gives the backward without mask only); the backward at head dimension 256 takes head dimension
128's. Lengths outside 512-16k and head dimensions outside 64-256 are clamped; in between the
tables are interpolated linearly in ``log2``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from perfmodel._enum import ParsedEnum
from perfmodel.errors import ConfigError

#: Tensor-core peak the Hopper tables are measured against (H100 SXM5 dense BF16, TFLOP/s).
_H100_PEAK_TFLOPS = 989.4

#: Sequence lengths of the FlashAttention-3 figures.
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)


class AttentionBackend(str, ParsedEnum, where="attention_backend"):
    """The fused-attention kernel library a software stack runs.

    ``generic``: the backend is not known; the model uses the fitted or default pair
    ``ComputeParams.fused_attention_efficiency`` / ``fused_attention_bwd_efficiency`` (what it
    did before backends were modelled, and what a calibration profile fits). ``sdpa``:
    PyTorch's ``scaled_dot_product_attention`` with its own backend choice (:func:`resolve`).
    ``sdpa-efficient`` and ``sdpa-math`` force the memory-efficient (xFormers/CUTLASS) and the
    unfused math paths.
    """

    GENERIC = "generic"
    FLASH_ATTENTION_2 = "fa2"
    FLASH_ATTENTION_3 = "fa3"
    CUDNN = "cudnn"
    SDPA = "sdpa"
    SDPA_EFFICIENT = "sdpa-efficient"
    SDPA_MATH = "sdpa-math"


@dataclass(frozen=True)
class _Curve:
    """Efficiencies by head dimension (rows) and sequence length (columns, ``seqs``: powers of
    two, each twice the one before; :data:`_SEQ` unless stated)."""

    by_head_dim: Mapping[int, tuple[float, ...]]
    seqs: tuple[int, ...] = _SEQ

    def at(self, head_dim: int, seq: int) -> float:
        dims = sorted(self.by_head_dim)
        x = _clamped_log2(head_dim, dims[0], dims[-1])
        lo = max((d for d in dims if math.log2(d) <= x), default=dims[0])
        hi = min((d for d in dims if math.log2(d) >= x), default=dims[-1])
        v_lo = _interp_seq(self.by_head_dim[lo], seq, self.seqs)
        if hi == lo:
            return v_lo
        t = (x - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return v_lo + t * (_interp_seq(self.by_head_dim[hi], seq, self.seqs) - v_lo)


def _clamped_log2(v: float, lo: float, hi: float) -> float:
    return math.log2(min(max(float(v), lo), hi))


def _interp_seq(row: tuple[float, ...], seq: int, seqs: tuple[int, ...]) -> float:
    x = _clamped_log2(seq, seqs[0], seqs[-1])
    i = min(int(x - math.log2(seqs[0])), len(seqs) - 2)
    t = x - math.log2(seqs[i])
    return row[i] + t * (row[i + 1] - row[i])


def _frac(*tflops: float) -> tuple[float, ...]:
    return tuple(v / _H100_PEAK_TFLOPS for v in tflops)


# -- Hopper, FlashAttention-3 paper (TFLOP/s on H100 SXM5, BF16) ---------------------------------
# Figure 5: forward without mask (a, c, e) and with the causal mask (b, d, f); Figure 6: backward
# without mask. The 512-token bars of the head-dimension-128 forward without mask read 467/497
# for cuDNN/FlashAttention-3 in one reading and the reverse in another: both take the mean, 482.
_FA2_FWD = _Curve(
    {
        64: _frac(282, 306, 318, 321, 322, 324),
        128: _frac(309, 350, 362, 368, 370, 370),
        256: _frac(275, 313, 321, 323, 324, 326),
    }
)
_FA2_FWD_CAUSAL = {
    128: _frac(191, 260, 298, 319, 333, 335),
    256: _frac(208, 251, 278, 293, 297, 298),
}
_FA2_BWD = _Curve(
    {64: _frac(198, 238, 264, 279, 287, 291), 128: _frac(214, 260, 291, 310, 318, 322)}
)
_CUDNN_FWD = _Curve(
    {
        64: _frac(335, 373, 395, 408, 412, 413),
        128: _frac(482, 574, 617, 609, 600, 595),
        256: _frac(470, 546, 580, 581, 580, 581),
    }
)
_CUDNN_FWD_CAUSAL = {
    128: _frac(315, 410, 484, 518, 529, 539),
    256: _frac(308, 391, 450, 483, 497, 509),
}
_CUDNN_BWD = _Curve(
    {64: _frac(266, 348, 395, 417, 432, 433), 128: _frac(305, 408, 465, 499, 518, 516)}
)
_FA3_FWD = _Curve(
    {
        64: _frac(333, 392, 460, 476, 496, 497),
        128: _frac(482, 565, 625, 638, 646, 648),
        256: _frac(482, 639, 707, 736, 746, 756),
    }
)
_FA3_FWD_CAUSAL = {
    128: _frac(292, 423, 521, 579, 602, 616),
    256: _frac(286, 427, 537, 612, 628, 642),
}
_FA3_BWD = _Curve(
    {64: _frac(272, 363, 422, 453, 472, 474), 128: _frac(316, 424, 501, 542, 559, 561)}
)


def _causal_curve(full: _Curve, causal: Mapping[int, tuple[float, ...]]) -> _Curve:
    """The causal forward table, head dimension 64 filled with head dimension 128's
    causal/non-causal ratio (the figure for head dimension 64 with mask is not used)."""
    rows = dict(causal)
    if 64 not in rows:
        r128 = [c / f for c, f in zip(causal[128], full.by_head_dim[128])]
        rows[64] = tuple(r * f for r, f in zip(r128, full.by_head_dim[64]))
    return _Curve(MappingProxyType(rows))


@dataclass(frozen=True)
class KernelTables:
    """Forward (without and with causal mask) and backward (without mask) efficiency of one
    kernel on one GPU generation."""

    fwd: _Curve
    fwd_causal: _Curve
    bwd: _Curve
    source: str
    scale_fwd: float = 1.0
    scale_bwd: float = 1.0
    bwd_causal: _Curve | None = None
    """The causal backward where measured; ``None``: the unmasked backward times the
    forward's causal/non-causal ratio."""
    sliding_128: tuple[float, float] | None = None
    """``(forward, backward)`` of a causal sliding window of 128 keys where measured
    (:meth:`efficiency`); ``None``: a window is read from the causal tables at its span."""

    def efficiency(
        self, head_dim: int, seq_kv: int, causal: bool, sliding: bool = False
    ) -> tuple[float, float]:
        """(forward, backward) fraction of the dense tensor-core peak.

        ``sliding``: a causal sliding window of ``seq_kv`` keys. Where :attr:`sliding_128` is
        measured, a window of up to 128 keys runs at it, one of the tables' shortest length
        (``seqs[0]``) or more at the causal tables' rate at that length, and one in between
        at the linear interpolation in ``log2`` of the window (a stated rule, not measured)."""
        if sliding and self.sliding_128 is not None:
            w_f, w_b = self.sliding_128
            f, b = self.efficiency(head_dim, seq_kv, True)
            lo, hi = 7.0, math.log2(self.fwd_causal.seqs[0])
            t = min(max((math.log2(max(seq_kv, 1)) - lo) / (hi - lo), 0.0), 1.0)
            return w_f + t * (f - w_f), w_b + t * (b - w_b)
        full_f = self.fwd.at(head_dim, seq_kv)
        fwd = self.fwd_causal.at(head_dim, seq_kv) if causal else full_f
        if causal and self.bwd_causal is not None:
            bwd = self.bwd_causal.at(head_dim, seq_kv)
        else:
            bwd = self.bwd.at(head_dim, seq_kv)
            if causal:  # the backward takes the forward's causal/non-causal ratio
                bwd *= fwd / full_f
        return fwd * self.scale_fwd, bwd * self.scale_bwd


_HOPPER_FA3 = "Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608) Fig. 5/6, H100 SXM5 BF16"


def _hopper(
    kernel: str, fwd: _Curve, fwd_causal: Mapping[int, tuple[float, ...]], bwd: _Curve
) -> KernelTables:
    """``kernel``'s tables read off the FlashAttention-3 figures, the causal forward completed
    by :func:`_causal_curve`."""
    return KernelTables(
        fwd, _causal_curve(fwd, fwd_causal), bwd, f"{kernel} on Hopper: {_HOPPER_FA3}"
    )


_FA2_TABLES = _hopper("FlashAttention-2", _FA2_FWD, _FA2_FWD_CAUSAL, _FA2_BWD)
_CUDNN_TABLES = _hopper("cuDNN fused attention", _CUDNN_FWD, _CUDNN_FWD_CAUSAL, _CUDNN_BWD)
_FA3_TABLES = _hopper("FlashAttention-3", _FA3_FWD, _FA3_FWD_CAUSAL, _FA3_BWD)

#: Ampere FlashAttention-2 plateau (fraction of the A100 peak): forward up to 73%, backward up to
#: 63% (Dao 2023, FlashAttention-2, abstract and section 4.1), on the Hopper FA2 curve's shape.
_AMPERE_FA2 = KernelTables(
    _FA2_TABLES.fwd,
    _FA2_TABLES.fwd_causal,
    _FA2_TABLES.bwd,
    "FlashAttention-2 on Ampere: forward up to 73%, backward up to 63% of the A100 peak (Dao "
    "2023, arXiv 2307.08691, abstract, sec. 4.1) on the Hopper FlashAttention-2 curve's shape "
    "(Shah et al. 2024 Fig. 5/6; same sm80 kernels)",
    scale_fwd=0.73 / max(_FA2_FWD.by_head_dim[128]),
    scale_bwd=0.63 / max(_FA2_BWD.by_head_dim[128]),
)

#: PyTorch's memory-efficient SDPA kernel (xFormers' CUTLASS kernel, sm50+) relative to
#: FlashAttention-2 on the same GPU. An ESTIMATE: the kernel is of the FlashAttention-1 generation
#: (one query block per thread block, no sequence-parallel work split), and FlashAttention-2
#: reports "around 2x speedup compared to FlashAttention" (Dao 2023, abstract). Used only where
#: SDPA falls to it (Blackwell in PyTorch 2.5.1-2.8) or a user asks for it.
SDPA_EFFICIENT_OVER_FA2 = 0.5

#: PyTorch's math SDPA path materialises the ``s x s`` scores: the FlashAttention-3 paper's
#: "Standard attention" bars on H100 (Fig. 5c, 6b: 35-139 TFLOP/s forward, 104-181 backward at
#: head dimension 128) are 0.1-0.4 of FlashAttention-2; we take the head-dimension-128
#: non-causal ratio at each length (the memory-bound path does not improve with length the way
#: the fused kernels do).
_MATH_FWD = _Curve({128: _frac(74, 100, 119, 133, 139, 139)})
_MATH_BWD = _Curve({128: _frac(104, 131, 159, 174, 181, 181)})
_MATH_TABLES = KernelTables(
    _MATH_FWD, _MATH_FWD, _MATH_BWD, f"standard attention on Hopper: {_HOPPER_FA3}"
)


# -- Blackwell, cuDNN frontend training benchmark (TFLOP/s on GB200 / GB300, BF16) ---------------
#: Source of the Blackwell cuDNN tables: the CSVs of NVIDIA's own cuDNN attention benchmark.
_CUDNN_BENCH = (
    "NVIDIA/cudnn-frontend @3929da2 benchmark/sdpa_benchmark_training/results/ (cuDNN "
    "backend 9.22.0, frontend 1.21.1, 2026-04-24; BF16, batch 2, non-deterministic backward; "
    "FLOP: 2 x unmasked pairs x heads x (d_qk + d_vo) forward, x (3 d_qk + 2 d_vo) backward)"
)

#: Sequence lengths of the cuDNN frontend benchmark.
_SEQ_CUDNN_BENCH = (2048, 4096, 8192, 16384, 32768)

#: Dense BF16 peak of the GB200 and the GB300 (catalogue, TFLOP/s), the benchmark's GPUs.
_GB_PEAK_TFLOPS = 2500.0

#: Backward FLOP of multi-head latent attention (``d_qk = 192``, ``d_vo = 128``) in this
#: module's convention (2.5 x forward, ``2.5 (192 + 128) = 800`` per pair and head) over the
#: benchmark's (``3 x 192 + 2 x 128 = 832``).
_MLA_BWD_FLOP = 800.0 / 832.0


def _gb(*tflops: float, k: float = 1.0) -> tuple[float, ...]:
    return tuple(k * v / _GB_PEAK_TFLOPS for v in tflops)


def _with_d64(rows: Mapping[int, tuple[float, ...]], hopper: _Curve) -> _Curve:
    """A Blackwell curve whose head dimension 64, not in the benchmark, is head dimension 128's
    times the Hopper cuDNN curve's 64/128 ratio at the same length (an assumption: the
    Hopper ratio carried over, lengths above 16k at 16k's)."""
    r64 = tuple(
        hopper.at(64, s) / hopper.at(128, s) * v for s, v in zip(_SEQ_CUDNN_BENCH, rows[128])
    )
    return _Curve(MappingProxyType({64: r64, **rows}), _SEQ_CUDNN_BENCH)


#: The benchmark's TFLOP/s by ``(pass, head dimension)``: ``(GB200 row, GB300 row)`` at
#: :data:`_SEQ_CUDNN_BENCH` (``fwd``/``bwd`` without mask, ``*_causal`` with ``top_left``), from
#: ``llama3.1/gb200/llama3.1_20260424_100750.csv``, ``llama3.1/gb300/llama3.1_20260424_100757.csv``
#: (head dimension 128: 64 query / 8 key-value heads), ``dsv3/gb200/dsv3_20260424_101009.csv``,
#: ``dsv3/gb300/dsv3_20260424_101002.csv`` (192: ``d_qk = 192``, ``d_vo = 128``, 128 heads; the
#: backward converted by :data:`_MLA_BWD_FLOP` where read); ``("sliding", 64)``: the
#: ``gpt_oss/gb{200,300}/gpt_oss_20260424_1000{11,22}.csv`` forward and backward (head dimension
#: 64, 128 heads, causal window of 128 keys, FLOP of the unmasked pairs) at 2k-16k only.
_CUDNN_BENCH_TFLOPS: Mapping[tuple[str, int], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("fwd", 128): ((1433, 1599, 1771, 1697, 1634), (1805, 1900, 2017, 2014, 1836)),
    ("fwd", 192): ((1492, 1666, 1759, 1812, 1584), (1770, 1937, 2021, 2032, 1917)),
    ("fwd_causal", 128): ((1097, 1408, 1574, 1708, 1622), (1373, 1703, 1856, 1915, 1953)),
    ("fwd_causal", 192): ((1072, 1406, 1585, 1678, 1743), (1285, 1590, 1825, 1967, 1991)),
    ("bwd", 128): ((1124, 1350, 1404, 1374, 1262), (1213, 1429, 1531, 1536, 1427)),
    ("bwd", 192): ((1048, 1175, 1125, 1088, 1086), (1117, 1267, 1301, 1254, 1246)),
    ("bwd_causal", 128): ((885, 1148, 1332, 1328, 1226), (967, 1248, 1435, 1507, 1490)),
    ("bwd_causal", 192): ((846, 1057, 1193, 1134, 1076), (914, 1143, 1291, 1302, 1289)),
    ("sliding_fwd", 64): ((153, 161, 165, 167), (160, 167, 172, 173)),
    ("sliding_bwd", 64): ((176, 182, 187, 188), (184, 191, 198, 200)),
}


def _cudnn_blackwell(gpu: str, col: int) -> KernelTables:
    """cuDNN tables of one Blackwell GPU, column ``col`` of :data:`_CUDNN_BENCH_TFLOPS` (0:
    GB200, 1: GB300): head dimensions 128 and 192 as measured, 64 by :func:`_with_d64`. The
    sliding window of 128 keys takes the mean of its 2k-16k columns (its cost does not depend
    on the length: 153-167 / 176-188 TFLOP/s on the GB200; the 32k column, 104 / 186, is left
    out)."""
    b = _CUDNN_BENCH_TFLOPS

    def rows(kind: str) -> dict[int, tuple[float, ...]]:
        k = _MLA_BWD_FLOP if kind.startswith("bwd") else 1.0
        return {128: _gb(*b[kind, 128][col]), 192: _gb(*b[kind, 192][col], k=k)}

    w_f, w_b = (sum(_gb(*b[kind, 64][col])) / 4 for kind in ("sliding_fwd", "sliding_bwd"))
    return KernelTables(
        _with_d64(rows("fwd"), _CUDNN_FWD),
        _with_d64(rows("fwd_causal"), _CUDNN_FWD),
        _with_d64(rows("bwd"), _CUDNN_BWD),
        f"cuDNN fused attention on {gpu}: {_CUDNN_BENCH}",
        bwd_causal=_with_d64(rows("bwd_causal"), _CUDNN_BWD),
        sliding_128=(w_f, w_b),
    )


_CUDNN_SM100 = _cudnn_blackwell("GB200 (sm100)", 0)
_CUDNN_SM103 = _cudnn_blackwell("GB300 (sm103, Blackwell Ultra)", 1)

#: cuDNN tables of the data-centre Blackwell GPUs by compute capability: the B200 and GB200
#: (10.0) read the GB200's, the B300 and GB300 (10.3) the GB300's, as fractions of each GPU's own
#: dense BF16 peak (the B200's and B300's 2250 TFLOP/s datasheet peaks against the GB200's and
#: GB300's 2500: the same dies at a lower power limit). Compute capability 12.x (RTX 50xx,
#: RTX PRO 6000) runs other kernels (no tensor memory): none published, the generic pair.
_CUDNN_BLACKWELL: Mapping[tuple[int, int], KernelTables] = MappingProxyType(
    {(10, 0): _CUDNN_SM100, (10, 3): _CUDNN_SM103}
)


def _tables(
    backend: AttentionBackend,
    architecture: str,
    compute_capability: tuple[int, int] | None = None,
) -> KernelTables | None:
    """Tables of a concrete backend on an architecture (and compute capability, which tells
    Blackwell's generations apart), ``None`` where none is published."""
    if backend is AttentionBackend.SDPA_MATH:
        return _MATH_TABLES
    if architecture == "Blackwell" and backend is AttentionBackend.CUDNN:
        return _CUDNN_BLACKWELL.get(compute_capability) if compute_capability else None
    if architecture == "Hopper":
        return {
            AttentionBackend.FLASH_ATTENTION_2: _FA2_TABLES,
            AttentionBackend.FLASH_ATTENTION_3: _FA3_TABLES,
            AttentionBackend.CUDNN: _CUDNN_TABLES,
        }.get(backend)
    if architecture in ("Ampere", "Ada") and backend is AttentionBackend.FLASH_ATTENTION_2:
        return _AMPERE_FA2
    return None


def resolve(backend: AttentionBackend, architecture: str) -> AttentionBackend:
    """The kernel ``backend`` runs on ``architecture``.

    * ``sdpa``: PyTorch 2.5.1-2.7 priority order flash > efficient > math > cuDNN (the cuDNN
      backend, preferred on H100 in 2.5.0, was deprioritised again after NaN reports, pytorch
      issues #139298 and #141133; torchtitan PR #1209, 2025-05: "the plan for the next
      release is to make this [cuDNN first] the default priority list for H100 and B200").
      The flash kernels are FlashAttention-2 (sm80-sm90). On Blackwell they do not exist in
      those releases, so SDPA falls to the memory-efficient kernel; torchtitan sets cuDNN
      first itself on B200 (PR #1209), a stack choice (``cudnn``), not SDPA's.
    * ``fa3``: Hopper only; elsewhere FlashAttention-2.
    * ``cudnn`` before Hopper: Transformer Engine prefers FlashAttention-2 on sm80 (its
      attention backend selection keeps cuDNN fused attention for sm90 and later), so
      FlashAttention-2.
    * AMD Instinct (CDNA architectures): ``generic`` for every fused backend. PyTorch's SDPA on
      ROCm runs its flash and memory-efficient backends as AOTriton kernels, or Composable
      Kernel's when ``torch.backends.cuda.preferred_rocm_fa_library("ck")`` is set
      (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``,
      ``check_flash_attention_hardware_support`` under ``USE_ROCM``: ``aotriton::v2::flash``
      / ``ROCmFABackend::Ck``), and Transformer Engine for ROCm runs CK or AOTriton fused
      attention; none is the FlashAttention-2/3 or cuDNN kernel of the NVIDIA tables and no
      efficiency table of them by head dimension and length is published, so the generic pair
      applies (the unfused ``sdpa-math`` path keeps its table).

    >>> resolve(AttentionBackend.SDPA, "Hopper").value, resolve(AttentionBackend.FLASH_ATTENTION_3, "Ampere").value
    ('fa2', 'fa2')
    >>> resolve(AttentionBackend.SDPA, "CDNA3").value, resolve(AttentionBackend.CUDNN, "CDNA4").value
    ('generic', 'generic')
    """
    if architecture.startswith("CDNA") and backend is not AttentionBackend.SDPA_MATH:
        return AttentionBackend.GENERIC
    if backend is AttentionBackend.SDPA:
        if architecture in ("Ampere", "Ada", "Hopper"):
            return AttentionBackend.FLASH_ATTENTION_2
        return AttentionBackend.SDPA_EFFICIENT
    if backend is AttentionBackend.FLASH_ATTENTION_3 and architecture != "Hopper":
        return AttentionBackend.FLASH_ATTENTION_2
    if backend is AttentionBackend.CUDNN and architecture in ("Ampere", "Ada"):
        return AttentionBackend.FLASH_ATTENTION_2
    return backend


@dataclass(frozen=True)
class AttentionEfficiency:
    """Forward and backward efficiency (fraction of the dense peak) of one attention call."""

    fwd: float
    bwd: float
    backend: AttentionBackend
    source: str
    from_table: bool = False
    """Whether the values come from a published benchmark table of the kernel (those are
    scaled by a power-limited board's clock ratio); ``False``: the generic pair (a fitted
    number of its own, not scaled)."""
    causal_over_rest: tuple[float, float] = (1.0, 1.0)
    """``(forward, backward)`` time of a causal ring's causal step over one unmasked step's
    (the same FLOP: the unmasked rate over the causal one,
    :func:`ring_attention_efficiency`); ``(1, 1)`` for one call or equal rates. The
    context-parallel overlap reads it to know which step hides which transfer
    (:class:`perfmodel.parallel.expert.RingSteps`)."""


def attention_efficiency(
    backend: AttentionBackend,
    architecture: str,
    head_dim: int,
    seq_kv: int,
    causal: bool,
    *,
    generic: tuple[float, float],
    compute_capability: tuple[int, int] | None = None,
    sliding: bool = False,
) -> AttentionEfficiency:
    """Efficiency of the fused attention ``backend`` runs on ``architecture``.

    ``generic`` is the ``(forward, backward)`` pair used where no table applies: the backend is
    ``generic``, or no benchmark of that kernel on that GPU generation is published
    (FlashAttention-2 on Blackwell, cuDNN on Blackwell without a known compute capability or on
    the 12.x parts, any kernel before Ampere). ``compute_capability`` tells data-centre
    Blackwell's tables apart (10.0: B200, GB200; 10.3: B300, GB300). ``sliding``: a causal
    sliding window whose span is ``seq_kv``, as the layer states it
    (:attr:`perfmodel.workload.layers.LayerCost.sliding_window`, read by
    :func:`perfmodel.compute.model.attention_shape`; :meth:`KernelTables.efficiency`; only tables
    that measured one read it). ``sdpa-efficient`` is
    :data:`SDPA_EFFICIENT_OVER_FA2` times FlashAttention-2 where FlashAttention-2 has a table,
    else half the generic pair.

    >>> e = attention_efficiency(AttentionBackend.SDPA, "Hopper", 128, 8192, True,
    ...                          generic=(0.5, 0.24))
    >>> e.backend.value, round(e.fwd, 3), round(e.bwd, 3)
    ('fa2', 0.337, 0.289)
    >>> e = attention_efficiency(AttentionBackend.CUDNN, "Blackwell", 128, 8192, True,
    ...                          generic=(0.5, 0.24), compute_capability=(10, 0))
    >>> round(e.fwd * 2500), round(e.bwd * 2500)   # GB200 TFLOP/s, cuDNN benchmark CSV
    (1574, 1332)

    Raises
    ------
    ConfigError
        On a non-positive head dimension or sequence length.
    """
    if head_dim <= 0 or seq_kv <= 0:
        raise ConfigError(
            f"attention with head dimension {head_dim} and sequence {seq_kv}",
            value=(head_dim, seq_kv),
            where="attention_efficiency",
        )
    kernel = resolve(backend, architecture)
    if kernel is AttentionBackend.GENERIC:
        return AttentionEfficiency(generic[0], generic[1], kernel, "generic fused-attention pair")
    if kernel is AttentionBackend.SDPA_EFFICIENT:
        fa2 = _tables(AttentionBackend.FLASH_ATTENTION_2, architecture)
        if fa2 is None:
            f, b = generic
            src = "generic pair"
        else:
            f, b = fa2.efficiency(head_dim, seq_kv, causal)
            src = fa2.source
        k = SDPA_EFFICIENT_OVER_FA2
        return AttentionEfficiency(f * k, b * k, kernel, f"{k} x ({src})", fa2 is not None)
    tables = _tables(kernel, architecture, compute_capability)
    if tables is None:
        return AttentionEfficiency(
            generic[0],
            generic[1],
            kernel,
            f"no published {kernel.value} benchmark on {architecture}: generic pair",
        )
    f, b = tables.efficiency(head_dim, seq_kv, causal, sliding)
    return AttentionEfficiency(f, b, kernel, tables.source, True)


def ring_attention_efficiency(
    first: AttentionEfficiency, rest: AttentionEfficiency, steps: int
) -> AttentionEfficiency:
    """Efficiency of a causal ring (context-parallel) attention of ``steps`` kernel calls of
    equal FLOP: the first at ``first`` (the causal block of the local queries and keys), the
    ``steps - 1`` others at ``rest`` (unmasked half blocks), each pass separately.

    With ``F`` the layer's FLOP of a pass, the time is ``F/steps / (peak first) +
    F (steps - 1)/steps / (peak rest)``, so the layer's efficiency is the FLOP-weighted harmonic
    mean ``steps / (1/first + (steps - 1)/rest)``. The step structure: PyTorch
    ``torch/distributed/tensor/experimental/_attention.py`` (``_is_causal_behavior``: step 0
    ``IS_CAUSAL``, later steps ``NOT_IS_CAUSAL`` under load balancing; ``_templated_ring_attention``
    keeps the first half of the received keys or the second half of the local queries, so every
    step sweeps ``s^2/2`` score pairs), Transformer Engine ``AttnFuncWithCPAndKVP2P`` (v1.8
    ``AttnFuncWithCP``: step ``i == 0`` causal, ``i <= rank`` half keys, else half queries,
    unmasked; v2.14 ``context_parallel.py``: sections ``"diagonal"``, ``"lower-triangle"``,
    ``"upper-triangle"``).

    ``rest`` is read (``ComputeModel.attention``) from the kernel's unmasked table at the
    local sequence length ``s``, an ``s x s`` call, though each unmasked step sweeps an
    ``s x s/2`` half block: the tables have no half-block shape, so a half block is taken to
    run at the rate of the full one (an approximation, not measured). The blend keeps the
    causal step's time over an unmasked step's, ``rest / first`` per pass
    (:attr:`AttentionEfficiency.causal_over_rest`), for the overlap of the ring's transfers.

    >>> c = AttentionEfficiency(0.4, 0.3, AttentionBackend.CUDNN, "t")
    >>> n = AttentionEfficiency(0.6, 0.5, AttentionBackend.CUDNN, "t")
    >>> e = ring_attention_efficiency(c, n, 3)
    >>> round(e.fwd, 4), round(e.bwd, 4)   # 3 / (1/0.4 + 2/0.6), 3 / (1/0.3 + 2/0.5)
    (0.5143, 0.4091)
    >>> e.causal_over_rest   # the causal step's time over an unmasked one's: 0.6/0.4, 0.5/0.3
    (1.4999999999999998, 1.6666666666666667)
    >>> ring_attention_efficiency(c, n, 1) == c == ring_attention_efficiency(c, c, 5)
    True
    """
    if steps <= 1 or (first.fwd, first.bwd) == (rest.fwd, rest.bwd):
        return first  # one rate: the blend of equal values is that value (not one ulp off)

    def blend(f: float, r: float) -> float:
        return steps / (1.0 / f + (steps - 1) / r)

    return AttentionEfficiency(
        blend(first.fwd, rest.fwd),
        blend(first.bwd, rest.bwd),
        first.backend,
        f"{first.source}; ring of {steps}: 1 causal step + {steps - 1} unmasked half blocks",
        first.from_table and rest.from_table,
        (rest.fwd / first.fwd, rest.bwd / first.bwd),
    )


__all__ = [
    "SDPA_EFFICIENT_OVER_FA2",
    "AttentionBackend",
    "AttentionEfficiency",
    "attention_efficiency",
    "resolve",
    "ring_attention_efficiency",
]
