"""The process's C heap (glibc's allocator, through ctypes): hand freed pages back to the OS, or hold them for
the next batch. Native workers (CTranslate2's generators and encoders, fastText) free and rebuild large buffers
over and over; which of the two serves a worker depends on whether its buffers change size (a model reloaded
per bucket) or repeat (an encoder's activations per batch).
"""

from __future__ import annotations

import functools
from typing import Any, Optional


@functools.lru_cache(maxsize=1)
def glibc() -> Optional[Any]:
    """This process's C library through ctypes when it is glibc (it has ``mallopt`` and ``malloc_trim``), else
    None. Loaded once, from the process's own symbols (no ``ldconfig`` call)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the OS (glibc's ``malloc_trim(0)``): True when done, False where
    the C library is not glibc. A long-lived worker that builds and frees large native buffers again and again
    (CTranslate2 reloading its weights per sampled bucket) otherwise keeps them: glibc raises its mmap threshold
    to the largest block freed, so later blocks come from per-thread arenas that it seldom shrinks. Measured
    on a fine-tuned SmolLM2-135M, int8, 64 titles x 8 samples a call: the process held 1.4 GiB after the
    first call and 5.6 GiB after the sixth (in a Ray task worker of the CGA run, 19 GiB, when Ray's memory
    monitor killed it); trimmed after each call, 0.35 GiB after every one, at the same speed."""
    libc = glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
# The largest mmap threshold glibc accepts (HEAP_MAX_SIZE / 2 on 64 bits), and a trim threshold above it.
HELD_MMAP_BYTES, HELD_TRIM_BYTES = 32 << 20, 64 << 20


def hold_native_heap() -> bool:
    """Keep the C heap's freed blocks for reuse instead of handing them back to the OS after each use (glibc's
    ``mallopt``: mmap threshold 32 MiB, trim threshold 64 MiB, for the whole process): True when set, False where
    the C library is not glibc. For a worker that runs the same native buffers through again and again
    (CTranslate2's encoder on CPU: a few MiB of activations per batch). In the candidate embedding pool's actor
    glibc otherwise returned them after each batch, and every batch faulted fresh zeroed pages in: 100k page
    faults in 5 s, a fifth of the actor's CPU in the kernel; held, 135, and the pool embedded 16-29% more
    candidates a second (benchmarks/classifiers/candidate_embedding.py). At most 64 MiB of free heap top per arena
    stays with the process; :func:`release_free_heap` still gives everything back."""
    libc = glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, HELD_MMAP_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, HELD_TRIM_BYTES)
    )
