"""Closed-form (alpha-beta-gamma) costs of collective algorithms.

Notation (Hockney's model as used by Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1)):

- ``n`` ranks, ``m`` message bytes (nccl-tests convention, see :class:`perfmodel.ops.CollectiveOp`),
- ``alpha_s``: latency of one step (seconds),
- ``bw_Bps``: bandwidth available to one rank per direction in that algorithm (bytes/s); the
  time per byte is ``beta = 1 / bw_Bps``,
- ``reduce_Bps``: rate at which a rank reduces (combines) incoming data, bytes/s; the time per
  byte is ``gamma = 1 / reduce_Bps`` (``inf`` = free, e.g. fused into the copy kernel).

Every function returns seconds and is pure; the topology-aware layer
(:mod:`perfmodel.comm.model`) decides which ``alpha_s`` and ``bw_Bps`` a group sees.
"""

from __future__ import annotations

import math

from perfmodel.errors import ConfigError

#: Sustained host (CPU) memory bandwidth used for CPU-side averaging when neither the hardware
#: catalogue nor :class:`LinkParams` gives one: 4-channel DDR4-2400 = 4 x 19.2 GB/s peak = 76.8 GB/s
#: (JEDEC JESD79-4), of which STREAM-like kernels sustain about 60-65 % on one socket
#: (McCalpin, STREAM results for Xeon E5 v4), i.e. ~48 GB/s; single-threaded NumPy averaging
#: in a framework reaches far less, which is a software effect modelled by the caller.
DEFAULT_HOST_MEMORY_BANDWIDTH_Bps = 48e9


def _check(n: int, message_bytes: float, alpha_s: float, bw_Bps: float) -> None:
    if int(n) != n or n < 1:
        raise ConfigError(f"group size must be a positive integer, got {n!r}", value=n, where="n")
    if not message_bytes > 0:
        raise ConfigError(
            f"message size must be > 0 bytes, got {message_bytes!r}",
            value=message_bytes,
            where="message_bytes",
        )
    if not alpha_s >= 0:
        raise ConfigError(
            f"latency must be >= 0 s, got {alpha_s!r}", value=alpha_s, where="alpha_s"
        )
    if not bw_Bps > 0:
        raise ConfigError(f"bandwidth must be > 0, got {bw_Bps!r}", value=bw_Bps, where="bw_Bps")


def _gamma(reduce_Bps: float) -> float:
    if not reduce_Bps > 0:
        raise ConfigError(
            f"reduction bandwidth must be > 0, got {reduce_Bps!r}",
            value=reduce_Bps,
            where="reduce_Bps",
        )
    return 0.0 if math.isinf(reduce_Bps) else 1.0 / reduce_Bps


def ring_allreduce_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float, reduce_Bps: float = math.inf
) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, ``2(n-1)`` steps of ``m/n`` bytes.

    ``T = 2(n-1) alpha + 2 (n-1)/n m / bw + (n-1)/n m / reduce``
    (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2); Thakur et al. 2005 eq. for the ring / Rabenseifner bound).

    >>> # 1 GB on 8 GPUs at 100 GB/s, 10 us per step: 14 x 10 us + 1.75 x 10 ms
    >>> round(ring_allreduce_time(8, 1e9, 10e-6, 100e9), 6)
    0.01764
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    frac = (n - 1) / n
    return (
        2 * (n - 1) * alpha_s
        + 2 * frac * message_bytes / bw_Bps
        + frac * message_bytes * _gamma(reduce_Bps)
    )


def ring_reducescatter_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float, reduce_Bps: float = math.inf
) -> float:
    """Ring reduce-scatter of an ``m``-byte input: ``(n-1) alpha + (n-1)/n m (1/bw + 1/reduce)``.

    >>> round(ring_reducescatter_time(4, 4e6, 1e-6, 1e9), 6)
    0.003003
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    frac = (n - 1) / n
    return (n - 1) * alpha_s + frac * message_bytes * (1.0 / bw_Bps + _gamma(reduce_Bps))


def ring_allgather_time(n: int, message_bytes: float, alpha_s: float, bw_Bps: float) -> float:
    """Ring all-gather of an ``m``-byte output: ``(n-1) alpha + (n-1)/n m / bw``.

    >>> round(ring_allgather_time(4, 4e6, 1e-6, 1e9), 6)
    0.003003
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    return (n - 1) * alpha_s + (n - 1) / n * message_bytes / bw_Bps


def pipelined_chain_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float, chunk_bytes: float | None = None
) -> float:
    """Broadcast or reduce along a pipelined chain (NCCL's ring broadcast): ``k`` chunks.

    ``T = (n - 2 + k) (alpha + c / bw)`` with ``c = m / k`` the chunk size; ``k`` defaults to
    the optimum ``sqrt((n-2) m / (alpha bw))`` (Thakur et al. 2005, pipelined broadcast). For
    large messages ``T -> m / bw``, the nccl-tests bus bandwidth of broadcast equals ``bw``.

    >>> round(pipelined_chain_time(2, 1e6, 0.0, 1e9), 6)
    0.001
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    if n == 2:
        return alpha_s + message_bytes / bw_Bps
    if chunk_bytes is None:
        if alpha_s == 0:
            return message_bytes / bw_Bps  # infinitely fine pipelining
        k = max(1.0, math.sqrt((n - 2) * message_bytes / (alpha_s * bw_Bps)))
    else:
        k = max(1.0, math.ceil(message_bytes / chunk_bytes))
    c = message_bytes / k
    return (n - 2 + k) * (alpha_s + c / bw_Bps)


def tree_allreduce_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float, reduce_Bps: float = math.inf
) -> float:
    """Double-binary-tree all-reduce (pipelined reduce up, broadcast down).

    Two complementary binary trees each carry half the data; every rank sends and receives at
    most ``m`` bytes per direction, so with pipelining
    ``T = 2 ceil(log2 n) alpha + 2 m / bw + m / reduce`` (Sanders, Speck & Träff 2009,
    "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 35;
    NCCL models tree all-reduce bandwidth as half the bus bandwidth, i.e. the same ``2 m / bw``).

    >>> round(tree_allreduce_time(8, 1e9, 0.0, 100e9), 6)
    0.02
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    depth = math.ceil(math.log2(n))
    return 2 * depth * alpha_s + 2 * message_bytes / bw_Bps + message_bytes * _gamma(reduce_Bps)


def halving_doubling_allreduce_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float, reduce_Bps: float = math.inf
) -> float:
    """Recursive halving-doubling (Rabenseifner) all-reduce for a power-of-two ``n``.

    ``T = 2 log2(n) alpha + 2 (n-1)/n m / bw + (n-1)/n m / reduce`` (Thakur et al. 2005,
    section 4.4). For non powers of two the ``n - 2^floor(log2 n)`` extra ranks first fold their
    data into partners, costing one extra ``alpha + m / bw + m / reduce`` step each way.

    >>> round(halving_doubling_allreduce_time(8, 1e9, 10e-6, 100e9), 6)
    0.01756
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    p = 1 << (n.bit_length() - 1)
    lg = p.bit_length() - 1
    g = _gamma(reduce_Bps)
    frac = (p - 1) / p
    t = 2 * lg * alpha_s + 2 * frac * message_bytes / bw_Bps + frac * message_bytes * g
    if p != n:
        t += 2 * (alpha_s + message_bytes / bw_Bps) + message_bytes * g
    return t


def recursive_doubling_allgather_time(
    n: int, message_bytes: float, alpha_s: float, bw_Bps: float
) -> float:
    """Recursive-doubling all-gather: ``log2(n) alpha + (n-1)/n m / bw`` (Thakur et al. 2005).

    >>> round(recursive_doubling_allgather_time(4, 4e6, 1e-6, 1e9), 6)
    0.003002
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    return math.ceil(math.log2(n)) * alpha_s + (n - 1) / n * message_bytes / bw_Bps


def torus2d_allreduce_time(
    rows: int,
    cols: int,
    message_bytes: float,
    alpha_row_s: float,
    bw_row_Bps: float,
    alpha_col_s: float,
    bw_col_Bps: float,
    reduce_Bps: float = math.inf,
) -> float:
    """2-D ring (torus) all-reduce on a ``rows x cols`` grid of ranks.

    Reduce-scatter along each row ring (``m``), all-reduce along each column ring on the
    ``m / cols`` shard, all-gather along each row ring (Mikami et al. 2018, "Massively
    distributed SGD: ImageNet/ResNet-50 training in a flash"; Ying et al. 2018, 2-D torus on TPU
    pods). Rows are the fast (intra-node) dimension: the same steps as
    :func:`hierarchical_allreduce_time` with each row ring (``cols`` ranks) as a node and the
    ``rows`` of them joined by the column rings.

    >>> round(torus2d_allreduce_time(2, 2, 4e6, 0.0, 1e9, 0.0, 1e9), 6)
    0.006
    """
    if rows < 1 or cols < 1:
        raise ConfigError(f"torus shape {rows}x{cols} invalid", value=(rows, cols), where="torus")
    return hierarchical_allreduce_time(
        cols, rows, message_bytes, alpha_row_s, bw_row_Bps, alpha_col_s, bw_col_Bps, reduce_Bps
    )


def hierarchical_allreduce_time(
    local: int,
    nodes: int,
    message_bytes: float,
    alpha_intra_s: float,
    bw_intra_Bps: float,
    alpha_inter_s: float,
    bw_inter_Bps: float,
    reduce_Bps: float = math.inf,
) -> float:
    """Hierarchical all-reduce: intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather.

    Each of the ``local`` ranks of a node all-reduces its ``m / local`` shard with its peers on
    the other ``nodes`` (ring), so ``bw_inter_Bps`` is the inter-node bandwidth **per rank**
    (NIC bandwidth shared by the local ranks). (Sergeev & Del Balso 2018, Horovod; Jia et al.
    2018 "Highly scalable deep learning training system with mixed-precision".)

    >>> round(hierarchical_allreduce_time(2, 2, 4e6, 0.0, 1e9, 0.0, 1e9), 6)
    0.006
    """
    if local < 1 or nodes < 1:
        raise ConfigError(
            f"hierarchy {local} x {nodes} invalid", value=(local, nodes), where="hierarchical"
        )
    t = 0.0
    if local > 1:
        t += ring_reducescatter_time(local, message_bytes, alpha_intra_s, bw_intra_Bps, reduce_Bps)
        t += ring_allgather_time(local, message_bytes, alpha_intra_s, bw_intra_Bps)
    if nodes > 1:
        t += ring_allreduce_time(
            nodes, message_bytes / local, alpha_inter_s, bw_inter_Bps, reduce_Bps
        )
    return t


def direct_alltoall_time(n: int, message_bytes: float, alpha_s: float, bw_Bps: float) -> float:
    """Direct all-to-all: each rank sends ``m/n`` to each of the ``n-1`` others concurrently.

    ``T = alpha + (n-1)/n m / bw`` with ``bw`` the rank's injection bandwidth (a non-blocking
    switch such as NVSwitch); NCCL posts all ``n-1`` send/recv pairs at once.

    >>> round(direct_alltoall_time(4, 4e6, 1e-6, 1e9), 6)
    0.003001
    """
    _check(n, message_bytes, alpha_s, bw_Bps)
    if n == 1:
        return 0.0
    return alpha_s + (n - 1) / n * message_bytes / bw_Bps


def p2p_time(message_bytes: float, alpha_s: float, bw_Bps: float) -> float:
    """Point-to-point transfer: ``alpha + m / bw`` (Hockney).

    >>> p2p_time(4e6, 0.0, 5e9)
    0.0008
    """
    _check(2, message_bytes, alpha_s, bw_Bps)
    return alpha_s + message_bytes / bw_Bps


def parameter_server_time(
    workers: int,
    message_bytes: float,
    alpha_s: float,
    worker_bw_Bps: float,
    server_bw_Bps: float,
    servers: int = 1,
    reduce_Bps: float = math.inf,
) -> float:
    """Synchronous parameter server: every worker pushes its ``m``-byte gradient, the server(s)
    sum them, every worker pulls the ``m``-byte weights.

    With ``s`` servers each owning ``m / s`` bytes (sharded, as in Li et al. 2014 "Scaling
    distributed machine learning with the parameter server"), a server receives
    ``w m / s`` bytes over its link of ``server_bw`` and a worker sends ``m`` bytes over its own link:

    ``T = 2 [alpha + max(m / worker_bw, w m / (s server_bw))] + w m / (s reduce)``.

    >>> # 4 workers, 1 MB each, 1 server with a 1 GB/s link: 2 x 4 ms
    >>> round(parameter_server_time(4, 1e6, 0.0, 1e9, 1e9), 6)
    0.008
    """
    _check(workers, message_bytes, alpha_s, worker_bw_Bps)
    if not server_bw_Bps > 0 or servers < 1:
        raise ConfigError(
            f"server bandwidth {server_bw_Bps!r} / servers {servers!r} invalid",
            value=(server_bw_Bps, servers),
            where="parameter_server",
        )
    per_server = workers * message_bytes / servers
    one_way = alpha_s + max(message_bytes / worker_bw_Bps, per_server / server_bw_Bps)
    return 2 * one_way + per_server * _gamma(reduce_Bps)


def host_average_time(
    n: int,
    message_bytes: float,
    alpha_s: float,
    gather_bw_Bps: float,
    host_memory_Bps: float,
) -> float:
    """CPU-side (or GPU0-side) averaging as in Keras ``multi_gpu_model`` / ``nn.DataParallel``.

    The ``n`` replicas' ``m``-byte gradients are copied to the host (or GPU0) over links whose
    aggregate bandwidth into the host is ``gather_bw``, averaged there at memory bandwidth (read
    ``n m``, write ``m``), and the ``m``-byte result is copied back to every replica:

    ``T = 2 alpha + n m / gather_bw + (n + 1) m / host_memory + n m / gather_bw``.

    >>> round(host_average_time(2, 1e6, 0.0, 10e9, 30e9), 6)
    0.0005
    """
    _check(n, message_bytes, alpha_s, gather_bw_Bps)
    if not host_memory_Bps > 0:
        raise ConfigError(
            f"host memory bandwidth must be > 0, got {host_memory_Bps!r}",
            value=host_memory_Bps,
            where="host_memory_Bps",
        )
    copy = n * message_bytes / gather_bw_Bps
    return 2 * alpha_s + 2 * copy + (n + 1) * message_bytes / host_memory_Bps


# --- pipelined chains (NCCL ring broadcast / reduce) ----------------------------------------

#: Bytes of one NCCL protocol step as a hop forwards it, by protocol: the buffer of each
#: connection split into ``NCCL_STEPS`` = 8 steps (NVIDIA/nccl ``src/include/device.h`` and
#: ``collectives.h``, v2.8-v2.29): Simple ``NCCL_BUFFSIZE`` 4 MiB / 8 = 512 KiB; LL128
#: ``NCCL_LL128_ELEMS_PER_THREAD`` 120 x ``NCCL_LL128_MAX_NTHREADS`` 640 x 8 B = 614,400 B per
#: step on the wire (15 of every 16 8-byte words data: 576,000 B); LL ``NCCL_LL_LINES_PER_THREAD``
#: 8 x ``NCCL_LL_MAX_NTHREADS`` 512 x 16 B = 65,536 B on the wire (half of it data).
STEP_WIRE_BYTES = {"Simple": 512 * 1024, "LL128": 614_400, "LL": 65_536}
#: Data bytes per wire byte of each protocol (LL128: 120 of 128; LL: 4 of 8).
WIRE_DATA_RATIO = {"Simple": 1.0, "LL128": 120 / 128, "LL": 0.5}


def chain_time(
    message_bytes: float,
    n: int,
    nodes: int,
    channels: int,
    protocol: object,
    *,
    base_s: float,
    intra_step_s: float,
    inter_step_s: float,
    intra_channel_Bps: float,
    inter_channel_Bps: float,
) -> float:
    """Latency of a pipelined chain over ``n`` ranks on ``nodes`` servers (NCCL's ring broadcast
    and reduce): the time its first step takes to reach the last rank, before the message
    streams at the chain's bandwidth (which the caller adds).

    ``T = base + (n - nodes) a_intra + (nodes - 1) (a_inter + w / B_inter) + [Simple]
    (n - nodes) w / B_intra``: ``n - 1`` hops, ``nodes - 1`` of them across servers, each with
    its step latency; a step of ``w`` wire bytes (``STEP_WIRE_BYTES``, or the channel's share of
    a smaller message) is stored whole at every network hop (the proxy posts it once the GPU
    has written it: NVIDIA/nccl v2.14.3-1 ``src/transport/net.cc`` ``sendProxyProgress`` waits
    for the step's ``tail``, which ``prims_ll128.h`` ``postSend`` advances once per step) and,
    with Simple, at every hop inside a server (the receiver waits for the step's tail); LL and
    LL128 readers poll each line's flag, so they forward line by line inside a server and
    from a network hop on. ``B_*``: one channel's share of the hop's bandwidth (the caller's:
    :meth:`perfmodel.comm.nccl_choice.NcclChoice.chain_time` takes NCCL's channels).

    >>> # 90 MB, 1,024 ranks on 128 servers, 8 channels (2 per 100 Gb NIC), LL128:
    >>> # 896 x 1.9 us, 127 x (4 us + 614,400 B at 46/8 GB/s), no base latency given
    >>> round(chain_time(90e6, 1024, 128, 8, "LL128", base_s=0.0, intra_step_s=1.9e-6,
    ...                  inter_step_s=4e-6, intra_channel_Bps=270e9 / 8,
    ...                  inter_channel_Bps=46e9 / 8) * 1e3, 1)
    15.8
    """
    proto = getattr(protocol, "value", protocol)
    if proto not in STEP_WIRE_BYTES:
        raise ConfigError(f"unknown protocol {protocol!r}", value=protocol, where="protocol")
    if int(n) != n or n < 1 or int(nodes) != nodes or not 1 <= nodes <= n:
        raise ConfigError(
            f"a chain needs 1 <= nodes <= n, got n={n!r}, nodes={nodes!r}", value=(n, nodes)
        )
    if n == 1:
        return 0.0
    per_channel = message_bytes / max(1, channels)
    wire = min(STEP_WIRE_BYTES[proto], per_channel / WIRE_DATA_RATIO[proto])
    inside, across = n - nodes, nodes - 1
    t = base_s + inside * intra_step_s + across * inter_step_s
    if across and math.isfinite(inter_channel_Bps) and inter_channel_Bps > 0:
        t += across * wire / inter_channel_Bps
    if proto == "Simple" and inside and math.isfinite(intra_channel_Bps) and intra_channel_Bps > 0:
        t += inside * wire / intra_channel_Bps
    return t
