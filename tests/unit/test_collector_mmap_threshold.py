"""The collector tunes glibc's malloc (``collector/memory.py``): large blocks are returned when freed, and on a
server store every thread shares one arena."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from sparktap.collector.memory import fix_mmap_threshold

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

# three threads that allocate after the call, all alive at once; then glibc's per-arena report (malloc_stats: stderr)
ARENAS = """
import ctypes, sys, threading
from sparktap.collector.memory import share_one_arena
print(share_one_arena() if sys.argv[1] == "share" else None)
together = threading.Barrier(3)
def work():
    blocks = [bytearray(4096) for _ in range(64)]
    together.wait()  # all three alive at once, each holding its arena
threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


def arenas(mode: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip(), done.stderr.count("Arena ")


@glibc_only
def test_the_threshold_is_set_on_glibc_unless_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert fix_mmap_threshold() is True
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "262144")  # the operator's choice wins
    assert fix_mmap_threshold() is False


@glibc_only
def test_threads_started_after_share_one_arena_use_the_main_arena_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert arenas("share") == ("True", 1)
    assert arenas("leave") == ("None", 4)  # glibc's default: an arena for each thread, up to 8 a core
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # the operator's choice wins
    assert arenas("share") == ("False", 2)
