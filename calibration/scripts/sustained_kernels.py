"""Sustained kernel rates on a lent GPU, with clock, power and throttle reasons (issue 24 item 9).

    python calibration/scripts/sustained_kernels.py --out OUTDIR [--seconds 2.0] [--plan-only]

Measures, on normally distributed operands, each kernel held back to back for ``--seconds``
(the board at its power limit, as in training; stas00/ml-engineering's MSMF uses 2 s windows):

* GEMMs at six training shapes (Llama-3-8B at 16k tokens per GPU: QKV, attention output, MLP
  gate/up, MLP down, LM head; Llama-3-70B's MLP at 8k tokens) in BF16, FP8 with fast
  accumulation and FP8 with split accumulation (``torch._scaled_mm(use_fast_accum=...)``);
* attention through ``scaled_dot_product_attention`` per SDPA backend (flash, efficient,
  cuDNN, math) at head dimension 64 and 128, sequence 4096, causal, forward + backward;
* grouped expert GEMMs at Mixtral 8x7B (8 experts of 4096 -> 14336, top-2) and Qwen3-30B-A3B
  (128 experts of 2048 -> 768, top-8) shapes, ``torch._grouped_mm`` where it exists, else a
  batched matmul over equal expert loads;
* the three attention calls of one rank's context-parallel ring as PyTorch's
  ``_templated_ring_attention`` makes them with its round-robin load balancing (torch 1963fc8,
  the torch of torchtitan's December 2024 CP table): step 0 causal over the rank's ``s`` local
  queries and keys, then ``s`` queries against the first half of the received keys
  (``key.chunk(2, dim=2)[0]``) or the second half of the queries (``query.chunk(2, dim=2)[1]``)
  against all ``s`` keys, without mask; each forward + backward through SDPA's flash and
  memory-efficient backends (torchtitan's CP allows only these two), at torchtitan's
  Llama-3.1-8B CP shapes (32 heads after ``repeat_kv``, head dimension 128, ``s`` = 32768). The
  three calls have equal FLOP; the model prices them from the FlashAttention-2 tables
  (``perfmodel.compute.attention``). Read against the model's step, the torchtitan CP rows
  (``validation/modern.jsonl``) spend 1.4-1.6x the modelled attention time in five of six rows
  (1.1x at Llama-3.1-8B cp2): these kernels say whether the per-step kernels are the cause.

Each record (one JSON line in ``OUTDIR/sustained.jsonl``) holds the kernel, its FLOP, the median
time of the timed window, the achieved TFLOP/s and the NVML readings taken during the window
(median SM clock, median power, OR of the clock-event reasons, decoded). ``--plan-only`` prints
the plan without a GPU. The measurement loop (:func:`run_plan`) takes the kernel factory and the
telemetry as arguments, so ``tests/calibration/test_sustained_script.py`` runs it on the CPU with
fakes. Nothing here has been run on a GPU yet: no results are claimed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

try:
    import perfmodel  # noqa: F401
except ModuleNotFoundError:  # pragma: no cover - run from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmodel.calibration.backends import TelemetrySample, make_telemetry, summarize_telemetry

#: Tokens per GPU of the GEMM shapes (a micro-batch of 2 x 8192, torchtitan's Llama-3-8B run).
TOKENS = 16384

#: Local tokens per rank of torchtitan's Llama-3.1-8B context-parallel rows (sequence 32768 x cp
#: over cp ranks: benchmarks/llama3_h100_202412_torchtitan.md, Table 2).
RING_LOCAL_TOKENS = 32768


@dataclass(frozen=True)
class Kernel:
    """One planned measurement: ``kind`` (gemm, attention, grouped), a name, the format
    (bf16, fp8, fp8-split) and the shape parameters the factory needs."""

    kind: str
    name: str
    fmt: str
    shape: dict[str, Any] = field(default_factory=dict)

    @property
    def flop(self) -> float:
        """FLOP of one call (attention: forward + backward, FlashAttention's count)."""
        s = self.shape
        if self.kind == "gemm":
            return 2.0 * s["m"] * s["n"] * s["k"]
        if self.kind == "grouped":
            return 2.0 * s["tokens"] * s["top_k"] * s["n"] * s["k"]
        if self.kind == "attention":
            fwd = 4.0 * s["batch"] * s["heads"] * s["seq"] ** 2 * s["head_dim"] * 0.5
            return fwd * 3.5  # forward + backward (2.5x)
        if self.kind == "ring":
            pairs = s["q_len"] * s["k_len"] * (0.5 if s["causal"] else 1.0)
            return 4.0 * s["batch"] * s["heads"] * pairs * s["head_dim"] * 3.5
        raise ValueError(f"unknown kernel kind {self.kind!r}")


def plan() -> list[Kernel]:
    """The measurements of issue 24 item 9, in order."""
    h, kv, ffn, vocab = 4096, 1024, 14336, 128256  # Llama-3-8B (8 KV heads of 128)
    shapes = {
        "llama3-8b.qkv": (TOKENS, h + 2 * kv, h),
        "llama3-8b.attn_out": (TOKENS, h, h),
        "llama3-8b.mlp_gate_up": (TOKENS, 2 * ffn, h),
        "llama3-8b.mlp_down": (TOKENS, h, ffn),
        "llama3-8b.lm_head": (TOKENS, vocab, h),
        "llama3-70b.mlp_gate_up": (8192, 2 * 28672, 8192),
    }
    out = [
        Kernel("gemm", name, fmt, {"m": m, "n": n, "k": k})
        for name, (m, n, k) in shapes.items()
        for fmt in ("bf16", "fp8", "fp8-split")
    ]
    for backend in ("flash", "efficient", "cudnn", "math"):
        for d in (64, 128):
            heads = 4096 // d
            out.append(
                Kernel(
                    "attention",
                    f"sdpa-{backend}.d{d}",
                    "bf16",
                    {"backend": backend, "batch": 2, "heads": heads, "seq": 4096, "head_dim": d},
                )
            )
    s = RING_LOCAL_TOKENS
    for backend in ("flash", "efficient"):
        for step, (q_len, k_len, causal) in (
            ("step0-causal", (s, s, True)),
            ("kv-half", (s, s // 2, False)),
            ("q-half", (s // 2, s, False)),
        ):
            shape = {"backend": backend, "batch": 1, "heads": 32, "seq": s, "q_len": q_len,
                     "k_len": k_len, "causal": causal, "head_dim": 128}  # fmt: skip
            out.append(Kernel("ring", f"cp-ring-{backend}.{step}", "bf16", shape))
    for name, experts, top_k, k, n in (
        ("mixtral-8x7b.w1", 8, 2, 4096, 14336),
        ("qwen3-30b-a3b.w1", 128, 8, 2048, 768),
    ):
        shape = {"experts": experts, "top_k": top_k, "k": k, "n": n, "tokens": TOKENS}
        out.append(Kernel("grouped", name, "bf16", shape))
    return out


@dataclass
class Record:
    """One measured kernel (a line of ``sustained.jsonl``)."""

    kind: str
    name: str
    fmt: str
    shape: dict[str, Any]
    flop: float
    seconds_held: float
    calls: int
    median_s: float | None
    tflops: float | None
    telemetry: dict[str, Any]
    error: str | None = None


def measure(
    kernel: Kernel,
    make: Callable[[Kernel], Callable[[], float]],
    telemetry: Any,
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Record:
    """Hold ``kernel`` for ``seconds``: ``make(kernel)`` returns a callable that runs one call and
    returns its device time (s); the second half of the window is the timed part, telemetry is
    read after every call there. A kernel the GPU/stack cannot run is recorded with its error."""
    try:
        call = make(kernel)
    except Exception as exc:  # not supported on this GPU / torch: record and go on
        return Record(kernel.kind, kernel.name, kernel.fmt, kernel.shape, kernel.flop,
                      0.0, 0, None, None, {}, f"{type(exc).__name__}: {exc}")  # fmt: skip
    start = clock()
    times: list[float] = []
    readings: list[TelemetrySample] = []
    calls = 0
    while True:
        t = call()
        calls += 1
        held = clock() - start
        if held >= seconds / 2:
            times.append(t)
            if telemetry is not None:
                try:
                    readings.append(telemetry.read())
                except Exception:  # telemetry never fails a measurement
                    pass
        if held >= seconds and times:
            break
    med = statistics.median(times)
    return Record(
        kernel.kind, kernel.name, kernel.fmt, kernel.shape, kernel.flop, held, calls, med,
        kernel.flop / med / 1e12 if med > 0 else None, summarize_telemetry(readings),
    )  # fmt: skip


def run_plan(
    kernels: Iterable[Kernel],
    make: Callable[[Kernel], Callable[[], float]],
    telemetry: Any,
    seconds: float,
    out: Path,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> list[Record]:
    """Measure every kernel, appending each record to ``out`` (JSON lines) as it completes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with out.open("a") as fh:
        for k in kernels:
            r = measure(k, make, telemetry, seconds, clock=clock)
            fh.write(json.dumps(asdict(r)) + "\n")
            fh.flush()
            records.append(r)
    return records


def torch_factory(
    device: str = "cuda",
) -> Callable[[Kernel], Callable[[], float]]:  # pragma: no cover - GPU only
    """Kernel factory on a CUDA GPU: normally distributed operands, CUDA-event timing."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape: int, dtype: Any = torch.bfloat16) -> Any:
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    def timed(fn: Callable[[], Any]) -> Callable[[], float]:
        def call() -> float:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) * 1e-3

        return call

    def make(k: Kernel) -> Callable[[], float]:
        s = k.shape
        if k.kind == "gemm" and k.fmt == "bf16":
            a, b = randn(s["m"], s["k"]) / s["k"] ** 0.5, randn(s["k"], s["n"])
            return timed(lambda: a @ b)
        if k.kind == "gemm":
            a = randn(s["m"], s["k"], dtype=torch.float32).to(torch.float8_e4m3fn)
            b = randn(s["n"], s["k"], dtype=torch.float32).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            fast = k.fmt == "fp8"
            return timed(
                lambda: torch._scaled_mm(
                    a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast
                )
            )
        if k.kind == "attention":
            backend = {
                "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION,
                "math": SDPBackend.MATH,
            }[s["backend"]]
            q, kk, v = (
                randn(s["batch"], s["heads"], s["seq"], s["head_dim"]).requires_grad_()
                for _ in range(3)
            )
            with sdpa_kernel(backend):  # fails here when the backend cannot run this shape
                F.scaled_dot_product_attention(q, kk, v, is_causal=True).sum().backward()

            def step() -> None:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
                out.backward(torch.ones_like(out))

            return timed(step)
        if k.kind == "ring":
            backend = {
                "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
            }[s["backend"]]
            full = [
                randn(s["batch"], s["heads"], s["seq"], s["head_dim"]).requires_grad_()
                for _ in range(3)
            ]
            # the ring's views of its local tensors (torch _templated_ring_attention)
            q = full[0] if s["q_len"] == s["seq"] else full[0].chunk(2, dim=2)[1]
            kk, v = (t if s["k_len"] == s["seq"] else t.chunk(2, dim=2)[0] for t in full[1:])

            def ring_step() -> None:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, kk, v, is_causal=s["causal"])
                out.backward(torch.ones_like(out))

            ring_step()  # fails here when the backend cannot run this shape
            return timed(ring_step)
        if k.kind == "grouped":
            e, per = s["experts"], s["tokens"] * s["top_k"] // s["experts"]
            x, w = randn(e * per, s["k"]) / s["k"] ** 0.5, randn(e, s["k"], s["n"])
            if hasattr(torch, "_grouped_mm"):
                offs = torch.arange(per, e * per + 1, per, device=dev, dtype=torch.int32)
                return timed(lambda: torch._grouped_mm(x, w, offs=offs))
            xb = x.view(e, per, s["k"])
            return timed(lambda: torch.bmm(xb, w))
        raise ValueError(k.kind)

    return make


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("out"))
    ap.add_argument("--seconds", type=float, default=2.0, help="window per kernel (default 2 s)")
    ap.add_argument("--plan-only", action="store_true", help="print the plan and exit")
    args = ap.parse_args(argv)
    kernels = plan()
    if args.plan_only:
        for k in kernels:
            print(f"{k.kind:9s} {k.name:28s} {k.fmt:9s} {k.flop / 1e12:9.2f} TFLOP  {k.shape}")
        print(
            f"{len(kernels)} kernels, ~{len(kernels) * args.seconds:.0f} s at {args.seconds} s each"
        )
        return 0
    telemetry = make_telemetry()  # pragma: no cover - GPU only
    records = run_plan(
        kernels, torch_factory(), telemetry, args.seconds, args.out / "sustained.jsonl"
    )
    for r in records:  # pragma: no cover - GPU only
        t = r.telemetry
        print(f"{r.name:28s} {r.fmt:9s} {r.tflops or float('nan'):8.1f} TFLOP/s "
              f"{t.get('sm_clock_mhz', '-')} MHz {t.get('power_w', '-')} W {t.get('throttle', '')} "
              f"{r.error or ''}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
