"""One local service process (a broker, a database server, ZooKeeper) for the tests, benchmarks and the demo.

`LocalService` holds the lifecycle the local services share: fresh ports, a launch with its log written to a file,
a start with a readiness deadline (retried on fresh ports when another process took one in the meantime), stop
(SIGCONT and SIGTERM, SIGKILL after `stop_timeout`), kill, pause/resume with SIGSTOP/SIGCONT (`with
service.paused(): ...`), the tail of its log for error messages, and the context manager. A subclass says how to
launch its process (`_spawn`) and when it is ready (`_wait_ready`), and starts it through `_start_attempts`.
A service started in its own process group (`own_process_group`) is signalled as a group, so a JVM and its
children stop and freeze together.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port, wait_until

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PortTakenError(ServiceError):
    """Something else took a port between free_port() and the service's bind: try other ports."""


class LocalService:
    """The lifecycle shared by the local service processes; subclasses launch and probe their own process."""

    service_name: ClassVar[str] = "local service"  # for messages: "the <service_name> is not started"
    own_process_group: ClassVar[bool] = True  # start_new_session, and signals go to the whole group
    parent_death_signal: ClassVar[bool] = False  # SIGTERM the child when the thread that started it ends
    port_attempts: ClassVar[int] = 3  # tries on fresh ports when a port was taken before the bind

    def __init__(self, *, host: str = "127.0.0.1", start_timeout: float = 30.0, stop_timeout: float = 15.0) -> None:
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0  # where the current launch's lines begin in its log file
        self._paused = False
        self._finalizer: weakref.finalize[..., LocalService] | None = None

    # -- state ------------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServiceError(f"the {self.service_name} is not started: call start() first")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def is_paused(self) -> bool:
        return self._paused

    def _log_paths(self) -> Sequence[Path]:
        """The files the service logs to, for `log_tail()` (the file `_spawn` writes by default)."""
        raise NotImplementedError

    # -- launch and readiness ---------------------------------------------------------------------------------

    @staticmethod
    def fresh_ports(count: int, host: str = "127.0.0.1") -> list[int]:
        """`count` ports that were free a moment ago (see `free_port`)."""
        return [free_port(host) for _ in range(count)]

    def _start_attempts(self, attempt: Callable[[], None], attempts: int = 1) -> None:
        """Run `attempt` (pick ports, write config, `_spawn`, `_wait_ready`) up to `attempts` times: again only when
        it failed because a port was taken (`_port_taken`); the process is ended after each failure."""
        for number in range(1, attempts + 1):
            try:
                attempt()
            except ServiceError as exc:
                retry = number < attempts and self._port_taken(exc)
                self._terminate()
                if retry:
                    continue
                raise  # the log stays where the message says, for diagnosis
            return

    def _port_taken(self, exc: ServiceError) -> bool:
        return isinstance(exc, PortTakenError)

    def _spawn(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        append: bool = True,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        what: str,
        hint: str = "",
    ) -> None:
        """Launch `argv` with stdout and stderr in `log_path`; ServiceError "<what>: <why>; <hint>" when it cannot
        run."""
        self._close_log()
        self._log = open(log_path, "ab" if append else "wb")  # noqa: SIM115 - closed in _terminate()
        self._log_start = self._log.tell()
        self._paused = False
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - the subclass's fixed argv, no shell
                list(argv),
                cwd=cwd,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_process_group,
                preexec_fn=_parent_death_signal() if self.parent_death_signal else None,
            )
        except OSError as exc:
            self._close_log()
            raise ServiceError(f"{what}: {exc}" + (f"; {hint}" if hint else "")) from exc
        # Never leave an orphan process holding a port, even when the caller forgets stop().
        self._finalizer = weakref.finalize(self, _kill, self._proc, self.own_process_group, 5.0)

    def _exit_code(self) -> int | None:
        """The exit code when the launched process has ended (or was never launched: -1), else None."""
        if self._proc is None:
            return -1
        return self._proc.poll()

    def _wait_ready(self, ready: Callable[[], bool], what: str, interval: float = 0.05) -> None:
        """Poll `ready` until it is true or `start_timeout` passes; a timeout's message ends with
        `_failure_context()` (where the log is, its last lines). `ready` raises a ServiceError (a
        `PortTakenError` to retry on fresh ports) when waiting cannot help."""
        try:
            wait_until(ready, self.start_timeout, what, interval)
        except ServiceError as exc:
            raise type(exc)(f"{exc}{self._failure_context(exc)}") from exc

    def _failure_context(self, exc: ServiceError) -> str:
        log_path = self._log_paths()[0]
        return f'; log path="{log_path}" ends with:\n{self.log_tail()}'

    # -- stop, kill, pause ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the process (SIGCONT if paused, SIGTERM, SIGKILL after stop_timeout). Safe to call twice."""
        self._terminate()

    def close(self) -> None:
        """Stop and remove what the service made for itself (subclasses add their directories)."""
        self.stop()

    def kill(self) -> None:
        """SIGKILL the process, as a crash would."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self._signal(proc, signal.SIGCONT)
            self._signal(proc, signal.SIGKILL)
            proc.wait()
        self._forget_process()

    def _terminate(self, timeout: float | None = None) -> None:
        proc = self._proc
        if proc is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
            _kill(proc, self.own_process_group, self.stop_timeout if timeout is None else timeout)
        self._forget_process()

    def _forget_process(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._proc = None
        self._paused = False
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _signal(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_process_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing answers, like a stalled host."""
        pid = self.pid
        if self._proc is None or self._paused:
            return
        self._signal(self._proc, signal.SIGSTOP)
        self._paused = True
        # every process of the group, not only the leader: a loaded machine delivers the signal to each in turn
        members = _group_members(pid) if self.own_process_group else []
        wait_until(
            lambda: all(_proc_state(p) in ("T", "t", None) for p in [pid, *members]),
            5.0,
            f"SIGSTOP of the {self.service_name} pid={pid}",
        )

    def resume(self) -> None:
        """Let a paused process carry on (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            pid = self._proc.pid
            members = _group_members(pid) if self.own_process_group else []
            self._signal(self._proc, signal.SIGCONT)
            wait_until(
                lambda: all(_proc_state(p) not in ("T", "t") for p in [pid, *members]),
                5.0,
                f"SIGCONT of the {self.service_name} pid={pid}",
            )
        self._paused = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[Self]:
        """`with service.paused(): ...` — frozen inside the block, resumed on the way out."""
        self.pause()
        try:
            yield self
        finally:
            if self.running:
                self.resume()

    # -- log --------------------------------------------------------------------------------------------------

    def log_tail(self, lines: int = 20) -> str:
        """The last non-blank lines of the service's log files, without colour codes (for error messages)."""
        chunks: list[str] = []
        found = False
        for path in self._log_paths_or_none():
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            found = True
            tail = [line for line in _ANSI.sub("", text).splitlines() if line.strip()][-lines:]
            if tail:
                chunks.append("\n".join(tail))
        if not found:
            return "(no log)"
        return "\n".join(chunks) or "(empty log)"

    def _log_paths_or_none(self) -> Sequence[Path]:
        try:
            return self._log_paths()
        except ServiceError:
            return ()

    def __enter__(self) -> Self:
        self.start()
        return self

    def start(self) -> LocalService:
        raise NotImplementedError

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _kill(proc: subprocess.Popen[bytes], group: bool, timeout: float) -> None:
    """SIGCONT (a stopped process ignores SIGTERM until continued) and SIGTERM, SIGKILL after `timeout`; to the
    whole process group when `group`."""
    if proc.poll() is not None:
        return

    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)

    send(signal.SIGCONT)
    send(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(timeout=timeout)


def _parent_death_signal() -> Callable[[], None] | None:
    """For the child between fork and exec: SIGTERM it when the process that started it dies, so a killed test run
    leaves no service behind. Linux sends it when the *thread* that started the child ends: start (and restart) it
    from a thread that outlives it, such as the main thread. libc is loaded here, in the parent. None (nothing to
    do) where prctl is missing."""
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_signal


def _group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` (from /proc; empty where /proc is not available)."""
    members: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            if int(fields[2]) == pgid:  # state, ppid, pgrp
                members.append(int(entry))
    return members


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat ("T" = stopped), or None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]
