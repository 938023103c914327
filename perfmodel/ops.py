"""Collective operations (shared vocabulary of workloads, the communication model and plans)."""

from __future__ import annotations

from perfmodel._enum import ParsedEnum, squash
from perfmodel.errors import ConfigError

_OP_ALIASES = {
    "ar": "allreduce",
    "ag": "allgather",
    "rs": "reducescatter",
    "a2a": "alltoall",
    "p2p": "sendrecv",
}


class CollectiveOp(
    str, ParsedEnum, where="--op", noun="collective", normalize=squash, aliases=_OP_ALIASES
):
    """A communication operation over a group of ranks.

    ``message_bytes`` conventions follow nccl-tests: for all-reduce, broadcast and reduce the
    size of the buffer on each rank; for all-gather the size of the *output* (whole) buffer; for
    reduce-scatter the size of the *input* (whole) buffer; for all-to-all the size of the whole
    send buffer of one rank; for send/recv the bytes sent.
    """

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    SENDRECV = "sendrecv"


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
ALLGATHER = CollectiveOp.ALLGATHER
ALLREDUCE = CollectiveOp.ALLREDUCE
ALLTOALL = CollectiveOp.ALLTOALL
BROADCAST = CollectiveOp.BROADCAST
REDUCE = CollectiveOp.REDUCE
REDUCESCATTER = CollectiveOp.REDUCESCATTER
SENDRECV = CollectiveOp.SENDRECV


def bus_factor(op: CollectiveOp, n: int) -> float:
    """nccl-tests bus-bandwidth factor: ``busbw = algbw * factor``.

    all-reduce ``2(n-1)/n``; reduce-scatter, all-gather, all-to-all ``(n-1)/n``; broadcast,
    reduce and send/recv ``1`` (source: nccl-tests doc/PERFORMANCE.md).

    >>> bus_factor(CollectiveOp.ALLREDUCE, 8)
    1.75
    """
    if n < 1:
        raise ConfigError(f"group size must be >= 1, got {n}", value=n, where="group")
    if op is ALLREDUCE:
        return 2.0 * (n - 1) / n
    if op in (ALLGATHER, REDUCESCATTER, ALLTOALL):
        return (n - 1) / n
    return 1.0
