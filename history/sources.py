"""Which event logs ``sparktap import`` reads: files, directories and globs expanded into logs, as Spark writes them.

A log is one file (plain, or compressed with the codec named by its extension, ``.inprogress`` while being
written) or one rolling ``eventlog_v2_*`` directory. Hidden files and Hadoop's ``.crc`` checksums are not logs.

The log directory is untrusted input (docs/security.md, "The log directory"): whoever can write a file into it
chooses its name (any byte but ``/`` and NUL: newlines, terminal escapes, bytes that are not UTF-8) and its kind.
So names stay ``str`` as Python decodes file names (undecodable bytes as surrogates, ``os.fsdecode``) from the
listing to the checkpoint, are shown through ``shown`` only, and reach the replay JVM framed by length
(``sparktap.history.importer``); only regular files are read, each opened here without blocking and checked on
the open descriptor (``open_log``); a symbolic link out of the directory it is listed in is refused unless
``--follow-symlinks``.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

ROLLING_PREFIX = "eventlog_v2_"
IN_PROGRESS = ".inprogress"
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


@dataclass(frozen=True)
class LogSource:
    path: str
    """absolute path of the file or rolling directory (a URI for ``--engine spark``)"""
    size: int
    """bytes on disk (all of a rolling log's files)"""
    mtime_ns: int
    """latest modification among its files"""
    inside: str | None = None
    """the directory the log was listed in (resolved): what a symbolic link may point into; None: not checked (a
    path named on the command line, or links followed)"""


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def shown(text: str) -> str:
    """``text`` safe for one line of a terminal or a log: control and other unprintable characters as escapes
    (``\\n``, ``\\x1b``, ``\\u202e``), a byte that was not UTF-8 in a file name (a surrogate) as ``\\xNN``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(out)


def _is_log_file(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(".crc")


def not_regular(mode: int) -> str | None:
    """Why a file of this mode is not read (a FIFO would block the read, a device never ends), or None."""
    for test, kind in _KINDS:
        if test(mode):
            return f"not a regular file ({kind}): only regular files are read"
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a regular file: only regular files are read"


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _checked(path: str, inside: str | None) -> tuple[str, os.stat_result] | str:
    """The resolved path of a directory entry and its (target's) stat, or why it is not read."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            st = os.stat(path)  # a dangling link: cannot be read
            if inside is not None and not _within(target, inside):
                return (f'a symbolic link to target="{target}" outside the directory it is in: not read '
                        "(--follow-symlinks reads it)")  # fmt: skip
        else:
            target = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    why = not_regular(st.st_mode)
    return why if why is not None else (target, st)


def checked_source(path: str, inside: str | None) -> LogSource | Skipped:
    """The log at local ``path`` (a file or a rolling log's directory) with its resolved path, or why it is not read:
    only regular files, and no symbolic link out of ``inside`` (None: any link, the user named it)."""
    checked = _checked(path, inside)
    if isinstance(checked, str):
        return Skipped(path, checked)
    resolved, st = checked
    if not stat.S_ISDIR(st.st_mode):
        return LogSource(resolved, st.st_size, st.st_mtime_ns, inside)
    members = rolling_members(resolved, inside)
    if isinstance(members, Skipped):
        return Skipped(path, members.reason)
    stats = [st for _, st in members]
    return LogSource(resolved, sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0), inside)


def rolling_members(directory: str, inside: str | None) -> list[tuple[str, os.stat_result]] | Skipped:
    """A rolling log's files (resolved paths and stats), every one a regular file within ``inside``; or why not."""
    out: list[tuple[str, os.stat_result]] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return Skipped(directory, f"cannot read it: {exc.strerror or exc}")
    for name in names:
        if not _is_log_file(name):
            continue
        checked = _checked(os.path.join(directory, name), inside)
        if isinstance(checked, str):
            return Skipped(directory, f'file="{shown(name)}" of this rolling log: {checked}')
        if stat.S_ISDIR(checked[1].st_mode):
            continue
        out.append(checked)
    return out


def expand(paths: list[str], follow_symlinks: bool = False) -> tuple[list[LogSource], list[Skipped]]:
    """The logs these arguments name, each once, in order; and the arguments and entries that name none (with why).
    A directory's entries and a glob's matches are untrusted: only regular files (and rolling directories of them)
    are logs, and a symbolic link must stay in the directory listed unless ``follow_symlinks``. A path named on
    the command line is the user's own choice: a link there is followed (it must still lead to a regular file)."""
    found: list[LogSource] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def add(item: LogSource | Skipped) -> None:
        if isinstance(item, Skipped):
            skipped.append(item)
        elif item.path not in seen:
            seen.add(item.path)
            found.append(item)

    def boundary(directory: str) -> str | None:
        return None if follow_symlinks else os.path.realpath(directory)

    for arg in paths:
        if glob.has_magic(arg):
            matches = sorted(glob.glob(arg))
            if not matches:
                skipped.append(Skipped(arg, "no file matches this pattern"))
            for match in matches:
                if _is_log_file(os.path.basename(match)):
                    _entry(match, boundary(os.path.dirname(match) or "."), add)
            continue
        if not os.path.lexists(arg):
            skipped.append(Skipped(arg, "no such file or directory"))
        elif os.path.isdir(arg) and not os.path.basename(arg.rstrip("/")).startswith(ROLLING_PREFIX):
            inside = boundary(arg)
            try:
                names = sorted(os.listdir(arg))
            except OSError as exc:
                skipped.append(Skipped(arg, f"cannot read it: {exc.strerror or exc}"))
                continue
            for name in names:
                if _is_log_file(name):
                    _entry(os.path.join(arg, name), inside, add)
        else:
            add(checked_source(arg, None))
    return found, skipped


def _entry(path: str, inside: str | None, add: Callable[[LogSource | Skipped], None]) -> None:
    """One entry of a listed directory: a log, or not one (a folder that is not a rolling log is passed over: a
    History Server directory holds logs, not folders of logs)."""
    if os.path.isdir(path) and not os.path.basename(path).startswith(ROLLING_PREFIX):
        return
    add(checked_source(path, inside))


@dataclass
class OpenedLog:
    """A local log's files opened for the replay JVM: (name, descriptor) in reading order, and whether it is in
    progress. The JVM reads each through ``/proc/<pid>/fd/<n>``: the very file checked here, whatever its name."""

    files: list[tuple[str, int]]
    in_progress: bool

    def close(self) -> None:
        for _, fd in self.files:
            try:
                os.close(fd)
            except OSError:
                pass  # already closed


def _open_checked(path: str, inside: str | None) -> int | str:
    """A read descriptor of the regular file at ``path`` (resolved), or why not: opened non-blocking (a FIFO put
    there since the listing does not hang the open) and without following a link, then checked on the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    try:
        why = not_regular(os.fstat(fd).st_mode)
        if why is None and stat.S_ISDIR(os.fstat(fd).st_mode):
            why = "a directory where a file was listed"
        if why is None and inside is not None and os.path.isdir("/proc/self/fd"):
            real = os.readlink(f"/proc/self/fd/{fd}")  # where the open file really is (a swapped parent shows)
            if not _within(real, inside):
                why = f'target="{real}" is outside the directory it is in: not read (--follow-symlinks reads it)'
    except OSError as exc:
        why = f"cannot read it: {exc.strerror or exc}"
    if why is not None:
        os.close(fd)
        return why
    return fd


def open_log(log: LogSource) -> OpenedLog | str:
    """The files of a local log opened for reading, or why it cannot be read (one line)."""
    if not os.path.isdir(log.path):
        opened = _open_checked(log.path, log.inside)
        if isinstance(opened, str):
            return opened
        return OpenedLog([(os.path.basename(log.path), opened)], log.path.endswith(IN_PROGRESS))
    members = rolling_members(log.path, log.inside)
    if isinstance(members, Skipped):
        return members.reason
    events = sorted((p for p, _ in members if os.path.basename(p).startswith("events_")), key=_roll_index)
    status = [os.path.basename(p) for p, _ in members if os.path.basename(p).startswith("appstatus_")]
    if not events:
        return "no events_N_* file in this rolling event log directory"
    result = OpenedLog([], not status or any(s.endswith(IN_PROGRESS) for s in status))
    for path in events:
        opened = _open_checked(path, log.inside)
        if isinstance(opened, str):
            result.close()
            return f'file="{shown(os.path.basename(path))}" of this rolling log: {opened}'
        result.files.append((os.path.basename(path), opened))
    return result


def _roll_index(path: str) -> tuple[int, str]:
    parts = os.path.basename(path).split("_", 2)
    try:
        return (int(parts[1]) if len(parts) > 1 else 1 << 62), path
    except ValueError:
        return 1 << 62, path


def describe(path: str) -> str:
    """The log's name as the summary shows it (relative to the working directory when under it; a URI as it is),
    with its control characters and undecodable bytes escaped (``shown``)."""
    if ":/" in path.split("/", 1)[0] + "/":
        return shown(path)
    try:
        return shown(os.path.relpath(path))
    except ValueError:
        return shown(path)
