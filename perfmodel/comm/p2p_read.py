"""NCCL's P2P transport over NVLink inside a server: the ring's one local copy per chunk.

A ring all-reduce's thread block runs, per channel and chunk, ``send``, ``n - 2`` x
``recvReduceSend``, ``recvReduceCopySend``, ``n - 2`` x ``recvCopySend`` and ``recv``, one
after the other (NVIDIA/nccl v2.14.3-1 ``src/collectives/device/all_reduce.h`` ``runRing``
lines 60-93: the step-0 send at line 64, the final ``directRecv`` at line 93); all-gather
(``all_gather.h``: ``directSend`` in place, ``directCopySend`` out of place, ``n - 2`` x
``directRecvCopySend``, ``directRecv``) and reduce-scatter (``reduce_scatter.h``: ``send``,
``n - 2`` x ``recvReduceSend``, ``recvReduceCopy``) are built alike. Every primitive but one
moves its chunk over NVLink; the one that does not is a copy in the GPU's own memory, and
while the block copies it moves nothing over NVLink, so the copy adds to the channel's time
(per rank; the ranks run alike). Which primitive it is depends on where the Simple buffer
(the FIFO) of a connection lives:

- **Read mode** (between two GPUs of compute capability 8.0 over NVLink: the A100 and A30;
  NVIDIA/nccl v2.14.3-1 ``src/graph/paths.cc`` line 336, v2.29.2-1 line 370 / v2.29.7-1 line
  374: "Enable P2P Read for Ampere/NVLink only", ``cudaCompCap == 80`` on both ends). The FIFO
  is the sender's (``src/transport/p2p.cc`` line 234) and each receiver pulls over NVLink, so
  the first primitive only fills the block's own FIFO: all-reduce's and reduce-scatter's
  ``send`` read and write ``m / n`` bytes per rank (``2 m / n`` of memory traffic);
  all-gather's out-of-place ``directCopySend`` reads its shard once and writes it twice (the
  output and the FIFO: ``3 m / n``; in place, ``directSend``, ``2 m / n``: the model charges
  the larger, nccl-tests' out-of-place figure). Unregistered buffers only: with registered
  buffers (``ncclCommRegister`` or CUDA-graph registration) the v2.29 step 0,
  ``directSend``, is an empty send under ``DirectRead`` and the A100 pays no copy; v2.14's
  step 0 is a plain ``send`` (never direct) and always copies.
- **Write mode** (every other NVLink pair: V100, H100, B200 and the 8.6 Ampere parts). The FIFO
  is the receiver's; the last primitive reads it locally. All-reduce's and all-gather's final
  ``directRecv`` copies it into the output (``2 m / n``) unless the sender wrote straight into
  that output through NCCL's *direct pointers*, which unregistered buffers get only when both
  ranks are threads of one process and the release is at most 2.22: v2.14.3-1
  ``src/transport/p2p.cc`` lines 238-245 set ``NCCL_DIRECT_WRITE`` only for equal
  ``pidHash`` (else ``NCCL_IPC_WRITE``, which ``prims_simple.h`` lines 320-336 use only with
  ``e->regUsed``); from v2.23.4-1 ``prims_simple.h`` ``loadSendConn`` / ``loadRecvConn`` set a
  direct flag only under ``Direct && regFlag`` (the v2.22.3-1 branch "direct read not allowed
  in non-register case" for unregistered same-process connections is gone).
  Reduce-scatter's final ``recvReduceCopy`` has no direct form: it reads the FIFO and the
  input and writes the output locally in every case (``3 m / n``).

The copy rate, ``B_mem`` (the datasheet memory bandwidth) for ``traffic`` bytes read plus
written, is an ASSUMPTION of unknown sign, not a measured rate: the copy is one thread block
per channel (12 channels on a DGX A100: ~85 GB/s of copy per block at 2,039 GB/s), and one SM
may not sustain that (slower), while the FIFO writes may partly stay in L2 (faster). No per-SM
copy bandwidth is cited here. The serial part (the block moves nothing over NVLink meanwhile)
holds per rank.

On a DGX A100 (NCCL's 235 GB/s, HBM2e 2,039 GB/s) a 2-GPU all-reduce then reaches
``1 / (1/235 + 1/2039)`` = 211 GB/s, 8 GPUs ``1 / (1/235 + 1/(14 x 1019.5))`` = 231 GB/s
(vTrain's A100 curves measure 197 and 229 GB/s at 1 GiB, 222 on 4 GPUs; not used to set
anything here; which A100 board vTrain used is not stated, the mapping takes the DGX A100's
80 GB part).

Whether the ranks are one process per GPU is a property of the job (:class:`ProcessLayout`,
:func:`with_process_layout`), stated once per training stack
(:attr:`perfmodel.parallel.software.SoftwarePreset.processes`, stamped on the topology by
:func:`perfmodel.pipeline.inputs.system_costs`): training through torchrun / Megatron-LM /
torchtitan / NeMo runs one process per GPU (the default); TensorFlow's in-graph replication
(``MirroredStrategy``, tf_cnn_benchmarks) and PyTorch ``nn.DataParallel`` one per server.
nccl-tests runs one process for ``-g N`` GPUs, one per GPU under MPI or srun with ``-g 1``
(``perfmodel comm --processes``; ``--compare`` reads the log's ``Pid`` column). The release is the one the scenario states, else the era of
the tuner table the model prices with (:func:`perfmodel.comm.tuner.tuner_for`: 2.29 for Hopper
and Blackwell, 2.8 before; :func:`priced_release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfmodel._enum import ParsedEnum
from perfmodel.comm.params import PROTO_SIMPLE, Protocol
from perfmodel.comm.tuner import (
    DEFAULT_RELEASE_EARLIER,
    DEFAULT_RELEASE_MODERN,
    DEFAULT_TUNER_MODERN,
    tuner_for,
)
from perfmodel.ops import CollectiveOp

#: CUDA compute capability of NCCL's P2P read mode (``paths.cc``: ``cudaCompCap == 80``).
READ_MODE_CAPABILITY = (8, 0)

#: Last NCCL release whose unregistered same-process P2P connections get direct pointers
#: (v2.22.3-1 ``prims_simple.h``; gone in v2.23.4-1).
DIRECT_UNREGISTERED_UNTIL = (2, 22)

#: Ring collectives built from one local primitive per chunk (``runRing`` of all_reduce.h,
#: all_gather.h, reduce_scatter.h).
_RING_OPS = frozenset({CollectiveOp.ALLREDUCE, CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER})

#: Topology ``meta`` key of the job's process layout (:func:`with_process_layout`).
META_KEY = "process_layout"


class ProcessLayout(ParsedEnum, where="processes", noun="process layout"):
    """How a job's ranks map onto processes.

    >>> ProcessLayout.parse("Per-Server")
    <ProcessLayout.PER_SERVER: 'per-server'>
    """

    PER_GPU = "per-gpu"
    """One process per GPU (torchrun, Megatron-LM, torchtitan, NeMo; nccl-tests under MPI or
    srun with ``-g 1``): NCCL's P2P connections go through CUDA IPC."""
    PER_SERVER = "per-server"
    """One process drives every GPU of a server (nccl-tests ``-g N``, DeepBench's
    ``nccl_single_all_reduce``): equal ``pidHash``, direct pointers up to 2.22."""


@dataclass(frozen=True)
class P2pPath:
    """How NCCL's P2P transport moves a ring's steps over NVLink between a group's GPUs.

    Attributes
    ----------
    read
        Read mode (compute capability 8.0 on both ends): the FIFO is the sender's.
    direct
        Write mode with direct pointers for unregistered buffers (one process, release
        <= 2.22); never in read mode ("direct read not allowed in non-register case").
    """

    read: bool
    direct: bool


def with_process_layout(topology: Any, layout: ProcessLayout) -> Any:
    """The same system run by a job of ``layout`` (``meta["process_layout"]``;
    :attr:`ProcessLayout.PER_GPU`, the default, removes the record)."""
    import dataclasses

    meta = dict(topology.meta)
    meta.pop(META_KEY, None)
    if layout is not ProcessLayout.PER_GPU:
        meta[META_KEY] = layout
    return dataclasses.replace(topology, meta=meta)


def process_layout(topology: Any) -> ProcessLayout:
    """The job's process layout recorded on ``topology`` (default one process per GPU)."""
    found = topology.meta.get(META_KEY)
    return found if isinstance(found, ProcessLayout) else ProcessLayout.PER_GPU


def priced_release(release: tuple[int, int] | None, arch: str) -> tuple[int, int]:
    """The NCCL release a scenario runs: the stated one, else the era of the tuner table the
    model prices with (2.29 for Hopper / Blackwell, 2.8 before: :func:`tuner_for`).

    >>> priced_release(None, "hopper"), priced_release(None, "ampere"), priced_release((2, 21), "ampere")
    ((2, 29), (2, 8), (2, 21))
    """
    if release is not None:
        return (int(release[0]), int(release[1]))
    modern = tuner_for(None, arch) is DEFAULT_TUNER_MODERN
    return DEFAULT_RELEASE_MODERN if modern else DEFAULT_RELEASE_EARLIER


def p2p_path(
    compute_capability: tuple[int, int] | None,
    *,
    nvlink: bool,
    layout: ProcessLayout,
    release: tuple[int, int],
) -> P2pPath | None:
    """NCCL's P2P path between two GPUs of ``compute_capability`` (``None``: no NVLink
    between them, or no CUDA compute capability: no copy is charged).

    >>> p2p_path((8, 0), nvlink=True, layout=ProcessLayout.PER_GPU, release=(2, 8))
    P2pPath(read=True, direct=False)
    >>> p2p_path((9, 0), nvlink=True, layout=ProcessLayout.PER_SERVER, release=(2, 22))
    P2pPath(read=False, direct=True)
    >>> p2p_path((9, 0), nvlink=True, layout=ProcessLayout.PER_SERVER, release=(2, 23)).direct
    False
    """
    if not nvlink or compute_capability is None:
        return None
    read = tuple(compute_capability) == READ_MODE_CAPABILITY
    direct = (
        not read
        and layout is ProcessLayout.PER_SERVER
        and tuple(release) <= DIRECT_UNREGISTERED_UNTIL
    )
    return P2pPath(read=read, direct=direct)


def local_copy_bytes(op: CollectiveOp, message_bytes: float, ranks: int, path: P2pPath) -> float:
    """Memory traffic (bytes read plus written) of one rank's local ring primitives:

    ============== ================================ =======================================
    op             read mode                        write mode
    ============== ================================ =======================================
    all-reduce     ``2 m / n`` (step-0 ``send``)    ``2 m / n`` (final ``directRecv``), 0 direct
    all-gather     ``3 m / n`` (``directCopySend``) ``2 m / n`` (final ``directRecv``), 0 direct
    reduce-scatter ``2 m / n`` (step-0 ``send``)    ``3 m / n`` (final ``recvReduceCopy``)
    ============== ================================ =======================================

    ``m`` = ``message_bytes`` as nccl-tests counts it (the buffer, the gathered output, the
    scattered input), ``n`` = ``ranks``; 0 for other collectives and fewer than 2 ranks.

    >>> read, write = P2pPath(read=True, direct=False), P2pPath(read=False, direct=True)
    >>> [local_copy_bytes(op, 8.0, 2, read) for op in (CollectiveOp.ALLREDUCE, CollectiveOp.ALLGATHER)]
    [8.0, 12.0]
    >>> [local_copy_bytes(op, 8.0, 2, write) for op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER)]
    [0.0, 12.0]
    """
    if op not in _RING_OPS or ranks < 2:
        return 0.0
    shard = message_bytes / ranks
    if path.read:
        return (3.0 if op is CollectiveOp.ALLGATHER else 2.0) * shard
    if op is CollectiveOp.REDUCESCATTER:
        return 3.0 * shard
    return 0.0 if path.direct else 2.0 * shard


def local_copy_s(
    op: CollectiveOp, message_bytes: float, ranks: int, memory_Bps: float, path: P2pPath
) -> float:
    """Time of one rank's local ring primitives, seconds: :func:`local_copy_bytes` at the
    datasheet memory bandwidth ``memory_Bps`` (bytes/s; an assumption of unknown sign, see the
    module docstring).

    >>> p = P2pPath(read=True, direct=False)
    >>> round(local_copy_s(CollectiveOp.ALLREDUCE, 2**30, 2, 2039e9, p) * 1e6, 1)  # 1 GiB, 2 A100
    526.6
    """
    return local_copy_bytes(op, message_bytes, ranks, path) / memory_Bps


def ring_copy_s(
    info: Any, op: CollectiveOp, message_bytes: float, ranks: int, proto: Protocol
) -> float | None:
    """The local copy a ring of ``ranks`` GPUs adds to ``op`` of ``message_bytes`` over the group
    ``info`` (a :class:`~perfmodel.comm.group.GroupInfo`), seconds: :func:`local_copy_s` where
    NCCL makes it (the Simple protocol over a P2P path inside one server, ``info.p2p``; 0 for
    a broadcast or reduce), ``None`` where it makes none. The one rule the analytic chain time
    and the flow replay both add."""
    if proto is not PROTO_SIMPLE or info.p2p is None or info.nodes != 1:
        return None
    return local_copy_s(op, message_bytes, ranks, info.gpu_memory_Bps, info.p2p)
