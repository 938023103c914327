"""Behaviour at scale: the ``scale.jsonl`` rows mapped to scenarios and predicted.

The rows (shipped in ``validation/scale.jsonl``, the ``published.jsonl`` schema) are

* InternEvo's InternLM-7B throughput per GPU on 8 to 1,024 A100 over 4 x 100 Gb RoCE per node
  with ZeRO-1 over all data-parallel ranks (``training_scaling``; :func:`map_training_row`), and
* nccl-tests ring all-reduce / all-gather bus bandwidth at 8 GiB on 16 to 512 DGX B200 with
  ``NCCL_ALGO=Ring`` and NCCL 2.29.7 (``comm_microbenchmark``; :func:`map_comm_row`).

InternEvo rows (``InternLM/InternEvo@34fc28d7``, ``doc/en/train_performance.md``): the model of
``configs/7B_sft.py`` (hidden 4096, 32 layers and heads, SwiGLU 11008, vocabulary 103168, sequence
2048) as the zoo's ``llama``; the stated micro-batch and micro-batch count, tensor parallelism
1 or 2 without sequence parallelism, bf16, AdamW, and the ``internevo`` software preset
(:mod:`perfmodel.parallel.software`: gradients all-reduced in 16 bit bucket by bucket during the
last backward, ZeRO-1 partitions, owner broadcasts of the updated parameters) with the owners
of the code that measured the table, July 2023 (:data:`INTERNEVO_PARAM_OWNERS`: size-greedy, one
broadcast per tensor once the ZeRO group outnumbers the tensors). The server is
taken as a DGX-A100-like NVSwitch node (the source names the GPU only) with the stated 4 x 100 Gb
RoCE NICs; NCCL 2.14, the release of the PyTorch 1.13.1 image InternEvo's ``doc/install.md``
names at that commit; that code's apex RMSNorm (re-run in backward) and flash-attention rotary
kernels (:data:`INTERNEVO_JULY_KERNELS`); InternLM-7B's attention biases. Not modelled: packed
variable-length samples (``pack_sample_into_one=False``); that code's attention kernels,
flash-attention v1.0.5 (FlashAttention-1: ``fa7337b`` ``doc/en/install.md``; submodule
``eff9fe6b`` from ``6150e4d`` on; the docker image ``torch1.13-cuda11.7-flashatten1.0.5`` of
``26205c1``), which the preset's FlashAttention-2 stands in for; flash-attention's
``FusedDenseFunc`` backward (``eff9fe6b`` ``flash_attn/ops/fused_dense.py`` lines 94-109), which
all-reduces each column-parallel input gradient (``Wqkv``, ``w1``, ``w2``: three per layer)
asynchronously beside its own weight-gradient GEMM, where the model charges two on the compute
stream (the row-parallel forward all-reduces are synchronous, lines 185-186, as modelled), and
the output projection's bias on tensor-parallel rank 0 only (lines 173-174); the ``torch.cuda.synchronize()``
before each gradient bucket (``fa7337b`` ``hybrid_zero_optim.py`` line 404: with the model's
bucket times it delays no step end by more than 5 ms) and the bucket's flatten and unflatten
copies; the fused cross-entropy of ``flash_attn.losses``.

B200 ring rows (``togethercomputer/together-dgxc-benchmarking@661e8e14``, ``worklog/``): what the
source itself says about them, and why the model keeps no step between 2 and 4 servers.

* **The 32-GPU rows ran on degraded nodes.** The report's session notes
  (``2026-04-27_nccl_rebaseline_report.md``, "Interpretation") say its single 4-node allocation
  drew ``gpu-[216,217,226,227]``, the cohort its own per-group sweeps mark "4n-slow" (ring -5 to
  -7% in any 4-node group they join: ``2026-04-26_nccl_per_group_scaling.md`` section 2,
  ``2026-04-28_straggler_finder_report.md``), and that its 8- and 16-node allocations included
  suspect nodes. Healthy 4-node groups: 332.0 GB/s (13 of 16 groups, 331.3-332.2, averaged
  over 2-16 GiB) and 332.7 (standard deviation 0.24); the 2026-04-16 sweep at 8 GiB: 332.4. So the
  healthy step from 2 to 4 servers is 344 -> 332 (-3.5%), not 344 -> 311.
* **NCCL 2.29.7 has no ring rule that changes between 2 and more servers** at 8 GiB: ring
  graphs keep ``bwIntra == bwInter`` (``src/graph/search.cc`` ``ncclTopoCompute`` pass 2), so
  the tuner's ``nNodes <= 2 ? bwIntra : bwInter`` (``tuning.cc`` ``ncclTopoTuneModel``) gives
  the same 8 channels x 48 GB/s at every server count; the channel doubling of ``connect.cc``
  depends on ``nNodes > 1`` only; the other node-count rules (``index2``: the LL, LL128, tree
  and NVLS-tree caps; the NVLS-tree chunk size of ``enqueue.cc``) do not touch a Simple ring.
  Each NIC carries one channel's stream per direction at any server count
  (with ``crossNic = 0`` the ring enters and leaves a server on one rail; ``crossNic = 2``
  pairs channels symmetrically), and NVIDIA's DGX SuperPOD B200 reference architecture keeps
  every rail of a 32-node scalable unit on one leaf ("Network Fabrics": rail-aligned groups of
  32 nodes, 31 with the UFM). NCCL's own tuner (8 x 48 GB/s and its ring latency, the model's)
  predicts 382, 381, 377, 370, 357 and 334 GB/s busbw on 2 to 64 servers: no step.
* **Per byte and fixed cost, from the source's own 2/4/8 GiB tables** (two sweeps, 2026-04-16 and
  -27; ``t = L + s x 2(n-1)/n / B`` through three sizes): the per-byte bus rate is 43.1 GB/s per
  NIC on 2 servers, 41.7 on a healthy 4, and 38.2-39.9 from 8 to 64 servers (4 servers on the
  slow cohort: 39.0); the fixed cost ``L`` is 5.3-6.2 ms on 64 servers and 2.7-3.2 ms on 32,
  where NCCL 2.29's ring latency (the model's) is 6.7 and 3.4 ms. The model's per-NIC 46 GB/s
  (NDR x 0.92) is what public rings reach elsewhere (1,024 H100 over 8 x 400G, 45.6-45.9 GB/s
  per NIC, NVIDIA/nccl-tests#322) and below this cluster's ``ib_write_bw`` per HCA (44,676-45,060
  MiB/s = 46.8-47.2 GB/s, ``2026-04-28_ib_layer_investigation.md`` section 3); nccl-tests
  ``sendrecv`` (one cross-server edge per HCA) reaches 42.5-44.3 GB/s there on 2 and 4 servers
  but 24.0-25.7 on 8 and 14.7-15.7 on 16-64 (the 04-16 and 04-27 reports): a fabric that
  loses bandwidth with the server count for reasons the sources do not state (placement
  across leaves, routing, the HPC-X net plugin that the ``NET/IB ... /SHARP`` log line
  suggests). Not modelled: no source gives the mechanism.

Errors are signed, ``predicted / measured - 1``. Nothing here feeds the model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from perfmodel.api import Scenario, predict
from perfmodel.comm.validation import CommComparison, CommScenario, CommSkip, compare
from perfmodel.errors import PerfModelError
from perfmodel.ops import CollectiveOp
from perfmodel.units import GB, GiB

#: InternLM-7B (InternEvo ``configs/7B_sft.py``: HIDDEN_SIZE 4096, NUM_ATTENTION_HEAD 32,
#: NUM_LAYER 32, MLP_RATIO 8/3 rounded to 11008, VOCAB_SIZE 103168, SEQ_LEN 2048), with biases on
#: the attention's ``Wqkv`` and ``out_proj`` (InternLM ``fa7337b``
#: ``internlm/model/multi_head_attention.py`` lines 78-97: ``bias=True``, and flash-attention's
#: ``RowParallelLinear`` default) and none in the MLP (``modeling_internlm.py`` ``bias=False``).
INTERNLM_7B = {
    "hidden": 4096,
    "layers": 32,
    "heads": 32,
    "kv_heads": 32,
    "ffn_hidden": 11008,
    "vocab": 103168,
    "seq_len": 2048,
    "attn_bias": True,
}

#: NCCL of the PyTorch 1.13.1 + CUDA 11.7 image (``internlm/internlm:torch1.13.1-cuda11.7.1``)
#: that InternEvo's ``doc/install.md`` names at 34fc28d7: PyTorch 1.13.1 wheels bundle NCCL 2.14.3.
INTERNEVO_NCCL = "2.14"


#: The owner rule of the code that measured the rows: the throughput table of
#: ``doc/train_performance.md`` is unchanged since InternLM ``c18bec9`` (2023-07-08; ``git diff
#: c18bec9 34fc28d7`` changes only trailing spaces), and the rows' stack states that era's config key
#: (``zero_overlap_communication=True``; ``34fc28d7``'s ``configs/7B_sft.py`` has
#: ``overlap_sync_grad`` / ``overlap_sync_param`` instead). Its ``HybridZeroOptimizer`` (``fa7337b``
#: ``internlm/solver/optimizer/hybrid_zero_optim.py`` lines 272-290) partitions by size; the module
#: walk (``ParamBcastSyncHandler``) arrived on 2023-08-23 (InternEvo ``3266432``).
INTERNEVO_PARAM_OWNERS = "size-greedy"

#: The kernels of that code beside PyTorch eager (software options of the ``internevo`` preset):
#: its layer normalises ``residual.float()`` with apex ``MixedFusedRMSNorm`` and re-runs the
#: dropout, residual add and norm in backward (``dropout_selective_checkpoint``), and rotates the
#: queries and keys with flash-attention's in-place ``rotary_emb`` kernel (InternLM ``fa7337b``
#: ``internlm/model/modeling_internlm.py`` lines 8, 68-75, 186-210; ``internlm/model/
#: embedding.py`` lines 62-110; apex 23.05 and flash-attention v1.0.5 per ``doc/en/install.md``).
INTERNEVO_JULY_KERNELS = {"apex_rms_norm": True, "fused_rope": True}


def map_training_row(row: Mapping[str, Any]) -> Scenario | str:
    """A :class:`Scenario` for an InternEvo row, or why it is skipped."""
    if row.get("kind") != "training_scaling":
        return "not a training row"
    if not str(row["id"]).startswith("internevo-"):
        return "no mapping for this source"
    hw, plan, batch = row["hardware"], row["plan"], row["batch"]
    gpus = int(hw["gpus"])
    per_node = int(hw.get("gpus_per_node") or 8)
    m = re.search(r"(\d+)\s*x\s*100\s*Gb", str(hw.get("inter_node_link", "")))
    if m is None:
        return "inter-node link not stated as N x 100 Gb"
    return Scenario(
        system="dgx-a100",
        nodes=max(1, math.ceil(gpus / per_node)),
        gpus=gpus,
        network="roce-100g",
        nics_per_node=int(m.group(1)),
        nccl=INTERNEVO_NCCL,
        model="llama",
        model_args=dict(INTERNLM_7B),
        global_batch=int(batch["global"]),
        microbatch=int(plan["micro_batch_size"]),
        tp=int(plan["tp"]),
        precision="bf16",
        optimizer="adamw",
        software="internevo",
        software_options={"param_owners": INTERNEVO_PARAM_OWNERS, **INTERNEVO_JULY_KERNELS},
        sequence_parallel=False,
        fidelity="analytic",
    )


def map_comm_row(row: Mapping[str, Any]) -> CommScenario | CommSkip:
    """The collective a B200 nccl-tests row measured, or a skip: the row's ``NCCL_ALGO``
    (``software``) is its NCCL environment (:class:`~perfmodel.comm.nccl_env.NcclEnv`), which
    NCCL's choice then follows."""
    from perfmodel.comm.nccl_env import NcclEnv

    rid = str(row["id"])
    if row.get("kind") != "comm_microbenchmark" or not rid.startswith("together-b200"):
        return CommSkip(rid, "no mapping for this source")
    hw = row["hardware"]
    gpus = int(hw["gpus"])
    per_node = int(hw.get("gpus_per_node") or 8)
    text = str(row.get("model", "")).lower()
    size = re.search(r"(\d+)\s*gib", text)
    if size is None or row.get("unit") != "GB/s":
        return CommSkip(rid, "message size or unit not stated")
    op = CollectiveOp.ALLGATHER if text.startswith("allgather") else CollectiveOp.ALLREDUCE
    algo = re.search(r"NCCL_ALGO=(\w+)", str(row.get("software", "")))
    nccl = re.search(r"NCCL (\d+\.\d+)", str(row.get("software", "")))
    return CommScenario(
        rid,
        "dgx-b200",
        gpus // per_node,
        gpus,
        op,
        int(size.group(1)) * GiB,
        "busbw",
        float(row["value"]) * GB,
        "InfiniBand",
        note="NCCL_ALGO as stated",
        nccl=nccl.group(1) if nccl else None,
        env=NcclEnv.parse([("NCCL_ALGO", algo.group(1))] if algo else [], where=rid),
    )


@dataclass(frozen=True)
class ScalePrediction:
    """One predicted row: the predicted and measured values in the row's own unit."""

    row: Mapping[str, Any]
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        """Signed relative error ``predicted / measured - 1``."""
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class ScaleResults:
    """Predicted training and collective rows, and ``(id, reason)`` of skipped or failed rows."""

    training: tuple[ScalePrediction, ...]
    comm: tuple[ScalePrediction, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    failed: tuple[tuple[str, str], ...] = ()


def scale_results(rows: Iterable[Mapping[str, Any]]) -> ScaleResults:
    """Predict every ``scale.jsonl`` row the mappings take (a second or two on 2 cores)."""
    training: list[ScalePrediction] = []
    comm: list[ScalePrediction] = []
    skipped: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    for row in rows:
        rid = str(row["id"])
        if row.get("kind") == "training_scaling":
            sc = map_training_row(row)
            if isinstance(sc, str):
                skipped.append((rid, sc))
                continue
            try:
                r = predict(sc, baseline=False)
            except PerfModelError as exc:
                failed.append((rid, str(exc)))
                continue
            training.append(ScalePrediction(row, r.tokens_per_s_per_gpu, float(row["value"])))
        elif row.get("kind") == "comm_microbenchmark":
            cs = map_comm_row(row)
            if isinstance(cs, CommSkip):
                skipped.append((rid, cs.reason))
                continue
            try:
                c = compare(cs)
            except PerfModelError as exc:
                failed.append((rid, str(exc)))
                continue
            assert isinstance(c, CommComparison)
            comm.append(ScalePrediction(row, c.predicted / GB, float(row["value"])))
        else:
            skipped.append((rid, f"kind {row.get('kind')!r} not mapped"))
    return ScaleResults(tuple(training), tuple(comm), tuple(skipped), tuple(failed))
