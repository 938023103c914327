"""NCCL's P2P *read* mode on A100 NVLink: the ring's one local copy per chunk.

Between two GPUs of compute capability 8.0 joined by NVLink, NCCL's P2P transport runs the
Simple protocol in read mode (NVIDIA/nccl v2.14.3-1 ``src/graph/paths.cc`` line 336, unchanged
in v2.29 line 416: "Enable P2P Read for Ampere/NVLink only", ``cudaCompCap == 80`` on both
ends): the Simple buffer of a connection lives on the *sender* (``src/transport/p2p.cc``
line 234, ``if (info->read) sendSize += buffSizes[NCCL_PROTO_SIMPLE]``) and the receiver's
thread block pulls each step over NVLink.

A ring all-reduce's thread block runs, per channel and chunk, ``send``, ``n - 2`` x
``recvReduceSend``, ``recvReduceCopySend``, ``n - 2`` x ``recvCopySend`` and ``recv``, one
after the other (``src/collectives/device/all_reduce.h`` ``runRing``, v2.14.3-1 lines 52-81);
all-gather and reduce-scatter start the same way (``all_gather.h`` / ``reduce_scatter.h``
``runRing``). In read mode the first primitive, ``send`` (never a direct operation), only copies
the chunk from the user's input into the block's own buffer in local memory; every later
primitive pulls its chunk over NVLink. While the block copies, it pulls nothing, so the copy
adds to the channel's time instead of overlapping it: each rank copies ``m / n`` bytes of the
``m``-byte collective (one chunk per channel and loop), which costs ``(m / n) / (B_mem / 2)``
(a copy reads and writes every byte once in the GPU's memory, ``B_mem`` its datasheet
bandwidth).

The bus-bandwidth effect grows as the ring shrinks: on a DGX A100 (NCCL's 235 GB/s, HBM2
1,555 GB/s) a 2-GPU all-reduce reaches ``1 / (1/235 + 1/1555)`` = 204 GB/s, 8 GPUs
``1 / (1/235 + 1/(14 x 777.5))`` = 230 GB/s (vTrain's A100 curves measure 197 and 229 GB/s at
1 GiB, 222 on 4 GPUs; not used to set anything here). Hopper and later GPUs write instead
(the final ``recv`` of a single-process job with direct pointers then moves nothing), as do
GPUs of compute capability 8.6 (A40, A10, RTX 30xx): none of them pays this copy here.
"""

from __future__ import annotations

from perfmodel.ops import CollectiveOp

#: GPUs of CUDA compute capability 8.0, by catalogue name prefix: the A100 and A30 (NVIDIA,
#: "CUDA GPUs - Compute Capability", developer.nvidia.com/cuda-gpus: 8.0 = A100, A30; the
#: other Ampere parts, A40 / A10 / A16 / A2 / RTX 30xx, are 8.6).
SM80_NAME_PREFIXES: tuple[str, ...] = ("A100", "A30")

#: Ring collectives whose first primitive is the local ``send`` copy (all_reduce.h,
#: all_gather.h, reduce_scatter.h ``runRing``).
_COPYING_OPS = frozenset(
    {CollectiveOp.ALLREDUCE, CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER}
)


def reads_over_nvlink(gpu_name: str, *, nvlink: bool) -> bool:
    """Whether NCCL's P2P transport reads (rather than writes) between two ``gpu_name`` GPUs:
    NVLink between them and compute capability 8.0 (:data:`SM80_NAME_PREFIXES`).

    >>> reads_over_nvlink("A100-SXM4-80GB", nvlink=True), reads_over_nvlink("H100-SXM5-80GB", nvlink=True)
    (True, False)
    """
    return nvlink and gpu_name.upper().startswith(SM80_NAME_PREFIXES)


def local_copy_s(op: CollectiveOp, message_bytes: float, ranks: int, memory_Bps: float) -> float:
    """Time of the ring's local ``send`` copies on one rank in P2P read mode, seconds:
    ``(message_bytes / ranks) / (memory_Bps / 2)`` for a ring all-reduce, all-gather or
    reduce-scatter (``message_bytes`` as nccl-tests counts it: the buffer, the gathered output,
    the scattered input), 0 for every other collective and for fewer than 2 ranks.

    >>> round(local_copy_s(CollectiveOp.ALLREDUCE, 2**30, 2, 1555e9) * 1e6, 1)  # 1 GiB, 2 A100
    690.5
    """
    if op not in _COPYING_OPS or ranks < 2:
        return 0.0
    return (message_bytes / ranks) / (memory_Bps / 2.0)
