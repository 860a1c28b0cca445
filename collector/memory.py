"""The collector's documented memory bound (docs/collector.md, "Memory"): peak RSS as a function of the byte budget.

    peak RSS <= base + factor x (batch_bytes + max_message_bytes)

``base`` is the process with nothing pending (Python, librdkafka, the driver; chDB's engine when embedded);
``factor`` is how many bytes of memory one byte of pending messages costs at the peak: the message itself, librdkafka's
prefetch (bounded to ``batch_bytes`` too), the decoded columns, and the insert's copies (clickhouse-driver's
serialisation on a server; Arrow and chDB's own blocks embedded). Measured with ``bench/collector_memory.py`` and
checked by ``tests/integration/test_collector_memory.py``; the Helm chart's memory limit is derived from the
``clickhouse`` line (``tests/unit/test_helm_values.py``).
"""

from __future__ import annotations

import ctypes
import os
from typing import Literal

MIB = 1 << 20

BASE_MIB: dict[str, float] = {"clickhouse": 160.0, "chdb": 480.0}
"""measured: about 130 MiB on a server, 430 MiB with chDB (its engine), with 1 KB events"""
FACTOR: dict[str, float] = {"clickhouse": 8.5, "chdb": 24.0}
"""measured with a 16 MiB budget and 0.9 MB events: 186–261 MiB peak on a server (261 MiB in a clean-clone suite
run, over the 5.5 first documented); 691–790 MiB on chDB (its own allocations vary from run to run). Each factor
keeps about 10 % above the highest peak seen."""


def peak_rss_bound_mib(kind: Literal["clickhouse", "chdb"], batch_bytes: int, max_message_bytes: int) -> float:
    """The documented peak RSS of a collector (MiB) on a store of ``kind`` with this byte budget."""
    return BASE_MIB[kind] + FACTOR[kind] * (batch_bytes + max_message_bytes) / MIB


M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameters (malloc.h)"""
MMAP_THRESHOLD_BYTES = 512 << 10


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt`` through ctypes: True when set, False when refused or not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (or no mallopt): nothing to set
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(param, value))


def fix_mmap_threshold() -> bool:
    """Make every allocation of 512 KiB or more its own mapping, returned to the system when freed (glibc's
    ``M_MMAP_THRESHOLD``, the process's C library through ctypes; ``MALLOC_MMAP_THRESHOLD_`` in the environment
    wins). By default glibc raises that threshold each time such a block is freed, up to 32 MiB; then large
    messages and librdkafka's fetch buffers come from heaps that fragment, and the peak RSS of
    ``tests/integration/test_collector_memory.py`` on a server went past its documented bound now and then; with
    this threshold it stays under it. A lower threshold (128 KiB) maps the Native block's column buffers afresh
    for every insert, which costs CPU (``bench.clickhouse_kafka_engine``). True when set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def share_one_arena() -> bool:
    """One malloc arena for every thread started from now on (glibc's ``M_ARENA_MAX`` 1; the environment's
    ``MALLOC_ARENA_MAX`` wins). ``sparktap collect`` calls it on a server store before anything starts a thread
    (chDB's engine threads are left their own arenas), so librdkafka's and the driver's threads share the
    process's main arena.

    librdkafka's fetch thread allocates each decompressed record batch and frees it once the collector has read it.
    In an arena of its own (64 MiB heaps that glibc creates and drops as that memory comes and goes) nearly each of
    those pages was faulted in afresh, several times the page faults and CPU of that thread in the main arena
    (``bench.clickhouse_kafka_engine``, docs/benchmarks.md). Threads that already have an arena keep it, so a
    process that has started threads gains little. True when set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    return _mallopt(M_ARENA_MAX, 1)
