"""CPU time of processes and threads from Linux's /proc, for the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path


def stat_cpu(stat: str) -> float:
    """utime + stime, in seconds, from the text of a /proc ``stat`` file (a process's or a thread's)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    return stat_cpu(Path(f"/proc/{pid}/stat").read_text())


def thread_cpu(pid: int) -> dict[str, tuple[str, float]]:
    """{thread id: (its name, utime + stime)} of a process's threads, from /proc."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        out[tid] = (stat[stat.index("(") + 1 : stat.rindex(")")], stat_cpu(stat))
    return out
