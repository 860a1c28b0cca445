"""The relay's local spool: events Kafka could not take yet, kept on disk (bounded) and resent oldest first.

Layout of the spool directory (shared by every relay on the host, and by ``sparktap relay-drain``)::

    seg-<time_ns>-<pid>-<n>.open         being written by relay <pid>
    seg-<time_ns>-<pid>-<n>.seg          sealed: ready to be resent by anyone
    seg-<time_ns>-<pid>-<n>.sending-<p>  claimed by process <p> for resending

A segment starts with a header line ``#sparktap-spool 1 <topic>`` and holds one record per line:
``<key>\\t<value>`` where the value is the event's compact JSON (which never contains a raw tab or newline).
Names sort by creation time, so resending oldest first is sorting by name. A segment whose writer or claimer
died (its pid is gone) can be taken over. The directory is bounded by ``max_bytes``: a record that does not fit
is lost (counted by the caller), except ``listener_health`` events, which may use a small reserve above the bound
so that the report of the loss itself survives.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEADER_PREFIX = b"#sparktap-spool 1 "
SEGMENT_BYTES = 4 << 20
HEALTH_RESERVE_BYTES = 64 << 10
RESCAN_SECONDS = 5.0
_NAME = re.compile(r"^seg-(\d{20})-(\d+)-(\d+)\.(open|seg|sending-(\d+))$")


def default_spool_dir() -> Path:
    """``<tmp>/sparktap-spool-<user>``: the same on every run on this host, so a later relay finds the spool."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", user) or "user"
    return Path(tempfile.gettempdir()) / f"sparktap-spool-{safe}"


def _private_dir(directory: Path) -> str:
    """Make the spool directory ours alone (0700); the problem when it belongs to someone else (a directory of
    that name planted in a shared tmp), else ""."""
    info = directory.stat()
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return (
            f'spool dir="{directory}" belongs to uid {info.st_uid}, not to this user: not spooling there; '
            "remove it or set spark.sparktap.relay.spoolDir to a directory of this user"
        )
    if info.st_mode & 0o077:
        directory.chmod(0o700)
    return ""


def _create_private(path: Path, buffering: int = -1) -> BinaryIO:
    """A new file only this user can read or write (0600, whatever the umask); FileExistsError if it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def safe_key(key: str) -> bytes:
    return key.replace("\t", "_").replace("\n", "_").replace("\r", "_").encode()


@dataclass
class Segment:
    """A claimed segment being resent: its records, how far they were handed to Kafka, and what is outstanding."""

    path: Path
    topic: str
    records: list[tuple[bytes, bytes]]
    next_index: int = 0
    outstanding: int = 0

    @property
    def fully_produced(self) -> bool:
        return self.next_index >= len(self.records)

    @property
    def finished(self) -> bool:
        return self.fully_produced and self.outstanding == 0


class Spool:
    """One process's handle on a spool directory."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        topic: str,
        *,
        segment_bytes: int = SEGMENT_BYTES,
        health_reserve_bytes: int = HEALTH_RESERVE_BYTES,
        pid: int | None = None,
    ) -> None:
        self.directory = directory
        self.max_bytes = max(0, max_bytes)
        self.topic = topic
        self.segment_bytes = segment_bytes
        self.health_reserve_bytes = health_reserve_bytes
        self.pid = os.getpid() if pid is None else pid
        self._counter = 0
        self._open_path: Path | None = None
        self._open_file: BinaryIO | None = None
        self._open_records = 0
        self._open_bytes = 0
        self._bytes = 0
        self._scanned_at = 0.0
        self.usable = True
        self.problem = ""
        if self.max_bytes > 0:
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                self.problem = _private_dir(self.directory)
                self.usable = not self.problem
            except OSError as exc:
                self.usable = False
                self.problem = f'cannot create spool dir="{self.directory}": {exc.strerror}'
        else:
            self.usable = False
            self.problem = "spooling is off (spool_max_bytes=0)"
        self.rescan()

    # ------------------------------------------------------------------------------------------- size

    def rescan(self) -> int:
        """Recount the bytes of every file in the directory (other relays write there too)."""
        total = 0
        if self.usable:
            with contextlib.suppress(OSError), os.scandir(self.directory) as entries:
                for entry in entries:
                    if entry.name.startswith("seg-"):
                        with contextlib.suppress(OSError):
                            total += entry.stat().st_size
        self._bytes = total
        self._scanned_at = time.monotonic()
        return total

    @property
    def size_bytes(self) -> int:
        if time.monotonic() - self._scanned_at > RESCAN_SECONDS:
            self.rescan()
        return self._bytes

    # ------------------------------------------------------------------------------------------- writing

    def append(self, key: bytes, value: bytes, *, priority: bool = False, force: bool = False) -> bool:
        """Append one record; False if it does not fit (the caller counts it as lost).

        ``priority`` (listener_health) may use the small reserve above the bound; ``force`` ignores the bound
        (records that already had room in the spool and are only being written back).
        """
        if not self.usable:
            return False
        record = key + b"\t" + value + b"\n"
        limit = self.max_bytes + (self.health_reserve_bytes if priority else 0)
        if not force and self.size_bytes + len(record) > limit:
            return False
        try:
            handle = self._writer()
            handle.write(record)
        except OSError as exc:
            self.problem = f'cannot write to spool dir="{self.directory}": {exc.strerror}'
            self._close_open(seal=True)
            return False
        self._bytes += len(record)
        self._open_records += 1
        self._open_bytes += len(record)
        if self._open_bytes >= self.segment_bytes:
            self.seal()
        return True

    def _writer(self) -> BinaryIO:
        if self._open_file is None:
            self._counter += 1
            name = f"seg-{time.time_ns():020d}-{self.pid}-{self._counter:06d}.open"
            path = self.directory / name
            handle = _create_private(path, buffering=256 * 1024)
            header = HEADER_PREFIX + self.topic.encode() + b"\n"
            handle.write(header)
            self._bytes += len(header)
            self._open_path, self._open_file = path, handle
            self._open_records = 0
            self._open_bytes = len(header)
        return self._open_file

    @property
    def open_records(self) -> int:
        return self._open_records

    def flush(self) -> None:
        if self._open_file is not None:
            with contextlib.suppress(OSError):
                self._open_file.flush()

    def seal(self) -> None:
        """Close the segment being written so that it can be resent."""
        self._close_open(seal=True)

    def _close_open(self, *, seal: bool) -> None:
        handle, path = self._open_file, self._open_path
        self._open_file, self._open_path = None, None
        if handle is None or path is None:
            return
        with contextlib.suppress(OSError):
            handle.close()
        if seal:
            with contextlib.suppress(OSError):
                if self._open_records == 0:
                    path.unlink()
                    self._bytes -= self._open_bytes
                else:
                    path.rename(path.with_suffix(".seg"))
        self._open_records = 0
        self._open_bytes = 0

    def write_back(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        """Put unsent records of a claimed segment back as a new sealed segment (no bound: they had room)."""
        if not records or not self.usable:
            return
        self._counter += 1
        name = f"seg-{time.time_ns():020d}-{self.pid}-{self._counter:06d}"
        tmp = self.directory / (name + ".open")
        with _create_private(tmp) as handle:
            handle.write(HEADER_PREFIX + topic.encode() + b"\n")
            for key, value in records:
                handle.write(key + b"\t" + value + b"\n")
        tmp.rename(tmp.with_suffix(".seg"))

    # ------------------------------------------------------------------------------------------- resending

    def claimable(self) -> list[Path]:
        """Segments anyone may resend, oldest first: sealed ones, and ones whose writer or claimer is gone."""
        if not self.usable:
            return []
        found: list[tuple[str, Path]] = []
        with contextlib.suppress(OSError), os.scandir(self.directory) as entries:
            for entry in entries:
                match = _NAME.match(entry.name)
                if match is None:
                    continue
                kind = match.group(4)
                owner = int(match.group(2)) if kind == "open" else int(match.group(5) or 0)
                if kind == "seg" or (owner != self.pid and not pid_alive(owner)):
                    found.append((entry.name, Path(entry.path)))
        return [path for _, path in sorted(found)]

    def claim(self, path: Path) -> Segment | None:
        """Take a segment for resending (atomic rename); None if someone else was faster."""
        stem = path.name.split(".", 1)[0]
        claimed = path.with_name(f"{stem}.sending-{self.pid}")
        try:
            path.rename(claimed)
            data = claimed.read_bytes()
        except OSError:
            return None
        topic, records = parse_segment(data, self.topic)
        return Segment(path=claimed, topic=topic, records=records)

    def claim_next(self) -> Segment | None:
        for path in self.claimable():
            segment = self.claim(path)
            if segment is not None:
                return segment
        return None

    def finish(self, segment: Segment) -> None:
        """Remove a segment whose records were all delivered (or written back)."""
        with contextlib.suppress(OSError):
            size = segment.path.stat().st_size
            segment.path.unlink()
            self._bytes = max(0, self._bytes - size)

    def close(self) -> None:
        self._close_open(seal=True)


def parse_segment(data: bytes, default_topic: str) -> tuple[str, list[tuple[bytes, bytes]]]:
    """Topic and records of a segment; a torn last line (a crash mid-write) is skipped."""
    topic = default_topic
    records: list[tuple[bytes, bytes]] = []
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # incomplete last record
    for index, line in enumerate(lines):
        if not line:
            continue
        if index == 0 and line.startswith(HEADER_PREFIX):
            topic = line[len(HEADER_PREFIX) :].decode(errors="replace") or default_topic
            continue
        key, sep, value = line.partition(b"\t")
        if sep and value.startswith(b"{"):
            records.append((key, value))
    return topic, records


def iter_records(directory: Path) -> Iterator[tuple[str, bytes, bytes]]:
    """(topic, key, value) of every record in a spool directory, oldest segment first (for inspection)."""
    for path in sorted(directory.glob("seg-*")):
        with contextlib.suppress(OSError):
            topic, records = parse_segment(path.read_bytes(), "")
            for key, value in records:
                yield topic, key, value
