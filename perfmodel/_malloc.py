"""Keep freed heap memory in the process while a step simulation runs (issue 27, item 1).

The flow replay of a step (:func:`perfmodel.sim.engine.simulate` with a
:class:`~perfmodel.sim.engine.FlowComm`) recomputes max-min fair rates at every flow event with
numpy arrays of up to ~40,000 entries (a few hundred ring-channel flows of ~128 links each) that
live for one computation. glibc's allocator returns the top of its heap to the kernel whenever
more than ``M_TRIM_THRESHOLD`` of it is free (``malloc/malloc.c``, ``systrim``), and grows it again
for the next computation: the GPT-3 175B interleaved plan on 1024 A100 (pytorch-ddp preset) made
~330,000 minor page faults, 0.4-0.5 s of system time on a 1.8 s user-time command (2-core
development machine, ``getrusage``). With the heap's top pad (``M_TOP_PAD``, which ``systrim``
keeps) at :data:`TOP_PAD_BYTES` the same command made ~17,000 and spent 0.04-0.07 s in the
kernel; its results are identical (the allocator's bookkeeping decides no number).

:func:`keep_heap` sets the pad for the outermost ``with`` only, through ``mallopt`` (glibc;
elsewhere it does nothing), and sets glibc's default back (128 KiB, ``DEFAULT_TOP_PAD``) when the
outermost one exits. Like any ``mallopt`` call, this also fixes the allocator's mmap threshold at
the value it had reached (glibc adjusts it dynamically until a parameter is set, ``mallopt(3)``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from contextlib import AbstractContextManager
from typing import Any

from perfmodel._outermost import Outermost

TOP_PAD_BYTES = 64 << 20
"""Free heap bytes kept at the top of the heap inside :func:`keep_heap` (64 MiB): more than the
arrays of one rate computation, a small share of a simulated step's peak memory (~80-90 MB
resident for the case above, unchanged by the pad)."""

M_TOP_PAD = -2
"""``mallopt`` parameter number of the top pad (glibc ``malloc.h``)."""

DEFAULT_TOP_PAD_BYTES = 128 * 1024
"""glibc's default top pad (``DEFAULT_TOP_PAD``, ``malloc/malloc.c``), set back on exit."""

_HEAP = Outermost()
_mallopt: Any = None  # libc's mallopt, looked up on first use (False: not glibc)


def _libc_mallopt() -> Any:
    global _mallopt
    if _mallopt is None:
        _mallopt = False
        try:  # "glibc 2.36" on glibc (os.confstr: no scan of the executable)
            glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (ValueError, OSError, AttributeError):  # not a glibc system
            glibc = ""
        if glibc.startswith("glibc"):
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
            except (OSError, AttributeError):  # pragma: no cover - no usable libc
                fn = None
            if fn is not None:
                fn.argtypes = (ctypes.c_int, ctypes.c_int)
                fn.restype = ctypes.c_int
                _mallopt = fn
    return _mallopt


def keep_heap(pad_bytes: int = TOP_PAD_BYTES) -> AbstractContextManager[None]:
    """Run the body with glibc's heap top pad at ``pad_bytes``; nested and concurrent uses
    share the outermost one's setting. Does nothing where the C library is not glibc."""

    def enter() -> None:
        fn = _libc_mallopt()
        if fn:
            fn(M_TOP_PAD, int(pad_bytes))

    def leave() -> None:
        fn = _libc_mallopt()
        if fn:
            fn(M_TOP_PAD, DEFAULT_TOP_PAD_BYTES)

    return _HEAP.use(enter, leave)


__all__ = ["DEFAULT_TOP_PAD_BYTES", "TOP_PAD_BYTES", "keep_heap"]
