"""Which event logs ``sparktap import`` reads: files, directories and globs expanded into logs, as Spark writes them.

A log is one file (plain, or compressed with the codec named by its extension, ``.inprogress`` while being
written) or one rolling ``eventlog_v2_*`` directory. Hidden files and Hadoop's ``.crc`` checksums are not logs.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

ROLLING_PREFIX = "eventlog_v2_"


@dataclass(frozen=True)
class LogSource:
    path: str
    """absolute path of the file or rolling directory"""
    size: int
    """bytes on disk (all of a rolling log's files)"""
    mtime_ns: int
    """latest modification among its files"""


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def _is_log_file(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(".crc")


def _source(path: Path) -> LogSource | Skipped:
    try:
        if path.is_dir():
            files = [p for p in path.iterdir() if p.is_file() and _is_log_file(p.name)]
            stats = [p.stat() for p in files]
            return LogSource(
                str(path.resolve()), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)
            )
        stat = path.stat()
    except OSError as exc:
        return Skipped(str(path), f"cannot read it: {exc.strerror or exc}")
    return LogSource(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def expand(paths: list[str]) -> tuple[list[LogSource], list[Skipped]]:
    """The logs these arguments name, each once, in order; and the arguments that name none (with why)."""
    found: list[LogSource] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def add(item: LogSource | Skipped) -> None:
        if isinstance(item, Skipped):
            skipped.append(item)
        elif item.path not in seen:
            seen.add(item.path)
            found.append(item)

    for arg in paths:
        matches = sorted(glob.glob(arg)) if glob.has_magic(arg) else [arg]
        if not matches:
            skipped.append(Skipped(arg, "no file matches this pattern"))
            continue
        for match in matches:
            path = Path(match)
            if not path.exists() and not path.is_symlink():
                skipped.append(Skipped(match, "no such file or directory"))
            elif path.is_dir() and not path.name.startswith(ROLLING_PREFIX):
                entries = sorted(p for p in path.iterdir() if _is_log_file(p.name))
                for entry in entries:
                    if entry.is_dir() and not entry.name.startswith(ROLLING_PREFIX):
                        continue  # not a log: a History Server directory holds logs, not folders of logs
                    add(_source(entry))
            else:
                add(_source(path))
    return found, skipped


def describe(path: str) -> str:
    """The log's name as the summary shows it (relative to the working directory when under it; a URI as it is)."""
    if ":/" in path.split("/", 1)[0] + "/":
        return path
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
