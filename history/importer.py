"""Import event logs: one replay JVM for the whole run, logs fed one at a time, events to a sink, a progress line on
a terminal and a summary at the end (docs/import.md).

The sink delivers in batches across logs (``sinks.BATCH_EVENTS`` / ``BATCH_BYTES``: the events of many small logs
in one insert per table, a large log's in several). A log is checkpointed only once the destination confirmed its
last event stored (``sink.confirmed``), the logs a delivery confirmed in one write of the checkpoint. A crash between
a delivery and the checkpoint write sends those logs again on the next run: the dedup keys make that idempotent.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any

from sparktap.errors import ServiceError
from sparktap.history import jvm as replay_jvm
from sparktap.history.checkpoint import Checkpoint, LogState
from sparktap.history.sinks import LiveCheck, Sink
from sparktap.history.sources import IN_PROGRESS, LogSource, OpenedLog, Skipped, describe, expand, open_log, shown

NO_APPLICATION = (
    "no application in it: neither a SparkListenerApplicationStart nor a SparkListenerEnvironmentUpdate (empty, or "
    "a fragment of a rolled log: import its eventlog_v2_* directory)"
)


STOPPED_SUFFIX = ": the events before it were imported"
"""how the replay JVM (ReplayMain) ends the line of a log it stopped in"""


class ReplayStoppedError(Exception):
    """The replay JVM stopped in the middle of a log (out of memory, killed): that log fails, alone."""


@dataclass
class Summary:
    logs: int = 0
    applications: set[tuple[str, str]] = field(default_factory=set)
    events: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    stopped: list[Skipped] = field(default_factory=list)
    twice: list[Skipped] = field(default_factory=list)
    """``--engine spark``: application attempts imported from two logs by two tasks (``engine_spark``)"""
    unchanged: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    batches: int = 0
    """deliveries to the destination (ClickHouse: batches of one insert per table; Kafka: producer flushes)"""
    inserts: int = 0

    @property
    def problems(self) -> bool:
        return bool(self.skipped or self.stopped or self.twice or self.rejected)

    def lines(self) -> list[str]:
        total = sum(self.events.values())
        rate = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        out = [
            f"imported {self.logs} logs: {len(self.applications)} applications, {total} events in "
            f"{self.seconds:.1f} s ({self.bytes / 1e6:.1f} MB, {rate:.1f} MB/s)"
        ]
        if total:
            out.append("events: " + ", ".join(f"{name} {n}" for name, n in sorted(self.events.items())))
        if self.inserts:
            out.append(f"delivered in {self.batches} batches ({self.inserts} inserts)")
        elif self.batches:
            out.append(f"delivered in {self.batches} batches")
        if self.unchanged:
            out.append(f"unchanged since the last import (nothing to send): {len(self.unchanged)} logs")
        for name in self.live:
            out.append(f"already stored by the live listener, not imported: {name}")
        for item in sorted(self.stopped, key=lambda i: i.path):
            out.append(f"stopped early: {describe(item.path)}: {item.reason}")
        for item in sorted(self.skipped, key=lambda i: i.path):
            out.append(f"skipped: {describe(item.path)}: {item.reason}")
        for item in sorted(self.twice, key=lambda i: i.path):
            out.append(f"imported twice: {describe(item.path)}: {item.reason}")
        for reason, n in sorted(self.rejected.items()):
            out.append(f"refused by the destination: {n} events: {reason}")
        # names and reasons come from the log directory and the logs: no character of theirs may end a line or
        # drive the terminal (shown() leaves what is already printable as it is)
        return [shown(line) for line in out]


class Progress:
    """One line on a terminal, rewritten at most twice a second: logs, events, MB/s."""

    def __init__(self, total_logs: int, stream: IO[str], enabled: bool) -> None:
        self.total_logs = total_logs
        self.stream = stream
        self.enabled = enabled
        self.started = time.monotonic()
        self._last = 0.0

    def show(self, summary: Summary, events_now: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < 0.5):
            return
        self._last = now
        elapsed = max(now - self.started, 1e-6)
        self.stream.write(
            f"\rlogs {summary.logs}/{self.total_logs}  events {events_now:,}  "
            f"{summary.bytes / 1e6:.1f} MB  {summary.bytes / 1e6 / elapsed:.1f} MB/s   "
        )
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


class Importer:
    def __init__(
        self,
        sink: Sink,
        checkpoint: Checkpoint,
        live: LiveCheck | None,
        cluster: str | None = None,
        java_home: str | None = None,
        progress: IO[str] | None = None,
        extra_classpath: list[str] | None = None,
        replay: replay_jvm.ReplayProcess | None = None,
        deliver: bool = True,
        each_log: bool = False,
        follow_symlinks: bool = False,
        limits: replay_jvm.Limits | None = None,
    ) -> None:
        """``replay``: a running replay JVM to feed (kept open; otherwise one is started and closed per run).
        ``deliver``: flush the sink at the end of the run and checkpoint each log once its events are confirmed
        stored (False: each log's state is recorded in ``checkpoint`` as its replay ends; the caller flushes the
        sink and only then reports what was sent, as a Spark task does once for all its logs). ``each_log``: deliver
        each log on its own, and checkpoint it (``--batch-mb 0``: a delivery per log, as before the batching).
        ``follow_symlinks``: read symbolic links that lead out of the directory listed (``--follow-symlinks``).
        ``limits``: the line cap and heap of the replay JVMs this starts (``--max-line-mb``, ``--jvm-heap-mb``)."""
        self.sink = sink
        self.checkpoint = checkpoint
        self.live = live
        self.cluster = cluster
        self.java_home = java_home
        self.progress_stream = progress if progress is not None else sys.stderr
        self.extra_classpath = extra_classpath or []
        self.replay = replay
        self.deliver = deliver
        self.each_log = each_log
        self.follow_symlinks = follow_symlinks
        self.limits = limits or replay_jvm.Limits()
        self.stopping = threading.Event()
        """set to stop after the log being replayed (``--follow`` on SIGTERM; ``abort`` ends that one too)"""
        self._current: replay_jvm.ReplayProcess | None = None
        self._request_id = 0
        self._failed: dict[str, tuple[int, int]] = {}
        """logs the replay JVM died on in this process, with their size and mtime: not tried again unchanged"""
        self._pending: list[tuple[str, LogState, int]] = []
        """logs replayed whose events are not all confirmed stored yet: path, state, ``sink.sent`` at its end"""
        self._owners: dict[str, str] = {}
        """application attempt (``app_id`` TAB ``app_attempt``) -> the log it was imported from (the checkpoint's,
        then this process's): one application, one copy"""

    def run(self, paths: list[str]) -> Summary:
        started = time.monotonic()
        logs, skipped = expand(paths, self.follow_symlinks)
        return self.run_logs(logs, skipped, started)

    def abort(self) -> None:
        """Kill the replay JVM of the running import (from another thread): the log it is on is not checkpointed."""
        self.stopping.set()
        current = self._current
        if current is not None:
            current.kill()

    def run_logs(self, logs: list[LogSource], skipped: list[Skipped], started: float | None = None) -> Summary:
        """Import these logs (local paths, or URIs the replay JVM opens through Hadoop's FileSystem)."""
        started = time.monotonic() if started is None else started
        summary = Summary(skipped=list(skipped))
        todo: list[LogSource] = []
        for log in logs:
            failed_before = self._failed.get(log.path) == (log.size, log.mtime_ns)  # reported once is enough
            if failed_before or self.checkpoint.unchanged(log.path, log.size, log.mtime_ns):
                summary.unchanged.append(log.path)
            else:
                todo.append(log)
        progress = Progress(len(todo), self.progress_stream, self.progress_stream.isatty())
        batches, inserts = self.sink.batches, self.sink.inserts
        self._pending = []
        if todo:
            try:
                self._replay_all(todo, summary, progress)
                if self.deliver:
                    self.sink.flush()
                    self._commit()
            except BaseException:
                if self.deliver:
                    self.sink.discard()  # not checkpointed: these logs are sent again on the next run
                self._pending = []
                raise
        progress.done()
        summary.rejected = self.sink.rejected()
        summary.batches, summary.inserts = self.sink.batches - batches, self.sink.inserts - inserts
        summary.seconds = time.monotonic() - started
        return summary

    def _replay_all(self, todo: list[LogSource], summary: Summary, progress: Progress) -> None:
        """Replay these logs in one JVM; one that kills it (out of heap) is reported and a fresh JVM replays the
        rest. A JVM given by the caller (a Spark task's) is not restarted: the error fails the task."""
        owned = self.replay is None
        replay = self.replay
        remaining = sum(log.size for log in todo)
        try:
            for log in todo:
                if self.stopping.is_set():
                    break
                if replay is None:
                    replay = replay_jvm.ReplayProcess(
                        replay_jvm.find(self.java_home, self.extra_classpath), self.cluster, remaining, self.limits
                    )
                self._current = replay
                remaining -= log.size
                try:
                    self._one(replay, log, summary, progress)
                except ReplayStoppedError as exc:
                    if self.stopping.is_set():
                        break  # stopped on purpose (abort): the logs done before it are still delivered
                    if not owned:
                        raise ServiceError(str(exc)) from None
                    self._failed[log.path] = (log.size, log.mtime_ns)
                    summary.stopped.append(Skipped(log.path, str(exc)))
                    replay.close()
                    replay = None
                    continue
                if self.each_log:
                    self.sink.flush()
                self._commit()
        finally:
            self._current = None
            if owned and replay is not None:
                replay.close()

    def _owner(self, key: str, log: str) -> str | None:
        """The other log this application attempt was already imported from, or None (issue 39: a copied log or a
        re-run of a test under the same id would merge two files' rows under one identity)."""
        if not self._owners:
            for name, state in self.checkpoint.logs.items():
                for attempt in state.attempts:
                    self._owners.setdefault(attempt, name)
        owner = self._owners.setdefault(key, log)
        same = owner == log or owner == log + IN_PROGRESS or owner + IN_PROGRESS == log  # Spark's rename at the end
        return None if same else owner

    def _request(self, replay: replay_jvm.ReplayProcess, log: LogSource) -> OpenedLog | str | None:
        """Hand the log to the JVM framed by length (a name may hold newlines; ReplayMain's class comment); the
        opened files the JVM reads (closed by the caller once it has), or why the log cannot be read."""
        opened: OpenedLog | None = None
        if ":/" not in log.path.split("/", 1)[0] + "/" and os.path.isdir("/proc/self/fd"):
            checked = open_log(log)
            if isinstance(checked, str):
                return checked
            opened = checked
        self._request_id += 1
        if opened is None:
            body = [replay_jvm.path_request(self._request_id, log.path)]
        else:
            body = [
                struct.pack(">qB", self._request_id, replay_jvm.OPENED_REQUEST),
                replay_jvm.framed(shown(log.path).encode()),
                struct.pack(">Bi", 1 if opened.in_progress else 0, len(opened.files)),
            ]
            for name, fd in opened.files:
                # the JVM gets the name escaped (its messages quote it) and the open file, never a path to resolve
                body.append(replay_jvm.framed(shown(name).encode()))
                body.append(replay_jvm.framed(f"/proc/{os.getpid()}/fd/{fd}".encode()))
        proc = replay.proc
        assert proc.stdin is not None  # noqa: S101 - a pipe (jvm.start)
        try:
            proc.stdin.write(b"".join(body))
            proc.stdin.flush()
        except BrokenPipeError:
            if opened is not None:
                opened.close()
            raise ReplayStoppedError(_jvm_failure(proc, replay.err, replay.limits)) from None
        return opened

    def _commit(self) -> None:
        """Checkpoint, in one write, the logs whose events the sink has confirmed stored."""
        confirmed = self.sink.confirmed
        done = 0  # the marks only grow: the confirmed logs are a prefix
        while done < len(self._pending) and self._pending[done][2] <= confirmed:
            done += 1
        if done:
            ready = {path: state for path, state, _mark in self._pending[:done]}
            del self._pending[:done]
            self.checkpoint.record_many(ready)

    def _one(self, replay: replay_jvm.ReplayProcess, log: LogSource, summary: Summary, progress: Progress) -> None:
        opened = self._request(replay, log)
        if isinstance(opened, str):
            summary.skipped.append(Skipped(log.path, opened))
            return
        try:
            self._answer(replay, log, summary, progress)
        finally:
            if opened is not None:
                opened.close()

    def _answer(self, replay: replay_jvm.ReplayProcess, log: LogSource, summary: Summary, progress: Progress) -> None:
        """Read the JVM's answer to the request just made: its events, then its end."""
        proc, err = replay.proc, replay.err
        assert proc.stdout is not None  # noqa: S101 - a pipe (jvm.start)
        before = self.checkpoint.state(log.path)
        if not before.attempts and not before.live and (log.path + IN_PROGRESS) in self.checkpoint.logs:
            # Spark renames "<app>.inprogress" to "<app>" when the application ends: continue after what was sent
            before = self.checkpoint.state(log.path + IN_PROGRESS)
        state = LogState(log.size, log.mtime_ns, dict(before.attempts), before.live)
        key = ""
        last_sent = 0
        skip_attempt = False
        copies: list[str] = []
        sent = 0
        read = proc.stdout.readline
        send = self.sink.send
        events = summary.events
        app_id = ""
        while True:
            line = read()
            if not line:
                raise ReplayStoppedError(_jvm_failure(proc, err, replay.limits, sent))
            if line[0] != 35:  # not "#": an event
                if skip_attempt:
                    continue
                head, _, value = line.partition(b"\t")
                seq_text, _, event_type = head.partition(b" ")
                if not seq_text.isdigit():
                    replay.kill()  # not the protocol: nothing it writes after this can be trusted
                    raise ReplayStoppedError(f"the replay JVM wrote a line that is not an event: {line[:200]!r}")
                seq = int(seq_text)
                if seq <= last_sent:
                    continue
                send(app_id, value.rstrip(b"\n"))
                state.attempts[key] = seq
                events[event_type.decode()] += 1
                sent += 1
                if sent % 2000 == 0:
                    progress.show(summary, sum(events.values()))
                continue
            control: dict[str, Any] = json.loads(line[1:])
            if control.get("fatal"):
                raise ServiceError(f"the replay JVM cannot run: {control['fatal']}")
            if control.get("id") != self._request_id:
                replay.kill()  # out of step: nothing more it says can be matched to a log
                raise ServiceError(
                    f'the replay JVM answered request id="{control.get("id")}" while id="{self._request_id}" '
                    f"was expected (log={describe(log.path)}): the import stopped; report this as a bug"
                )
            if control.get("attempt"):
                app_id = str(control["app_id"])
                attempt = str(control["app_attempt"])
                key = f"{app_id}\t{attempt}"
                owner = self._owner(key, log.path)
                if owner is not None:
                    skip_attempt = True
                    copies.append(
                        f'app_id="{app_id}" app_attempt="{attempt}" is already imported from file="{describe(owner)}": '
                        "one application, one copy (not imported; remove the copy, or import it into another store)"
                    )
                    continue
                skip_attempt = False
                summary.applications.add((app_id, attempt))
                last_sent = state.attempts.get(key, 0)
                if last_sent == 0 and (
                    state.live or (self.live is not None and self.live.stored_live(app_id, attempt))
                ):
                    skip_attempt = True
                    state.live = True
                    summary.live.append(f'{describe(log.path)} (app_id="{app_id}" app_attempt="{attempt}")')
            elif control.get("end"):
                if "skipped" in control and not control.get("lines"):
                    summary.skipped.append(Skipped(log.path, str(control["skipped"])))
                    return
                summary.skipped.extend(Skipped(log.path, why) for why in copies)
                if copies and not sent:  # a copy of another file: not checkpointed, so said again on every run
                    return
                if not key and not sent and not control.get("in_progress"):
                    # a file that is no event log at all says where: its first line that is not an event
                    stopped = str(control.get("stopped") or "").removesuffix(STOPPED_SUFFIX)
                    summary.skipped.append(
                        Skipped(log.path, f"{stopped}: nothing imported" if stopped else NO_APPLICATION)
                    )
                    return
                summary.logs += 1
                summary.bytes += int(control.get("bytes", 0))
                stop = control.get("stopped")
                if control.get("skipped"):
                    summary.stopped.append(Skipped(log.path, str(control["skipped"])))
                elif stop and not (control.get("in_progress") and control.get("partial_tail")):
                    summary.stopped.append(Skipped(log.path, str(stop)))
                if self.deliver:
                    self._pending.append((log.path, state, self.sink.sent))
                else:
                    self.checkpoint.record(log.path, state)
                progress.show(summary, sum(events.values()), force=True)
                return


def _jvm_failure(proc: Any, err: IO[bytes], limits: replay_jvm.Limits | None = None, sent: int = 0) -> str:
    try:
        code = proc.wait(timeout=10)  # its pipe closed: it is exiting, and its code says how
    except Exception:  # noqa: BLE001 - a JVM that does not exit after closing its output is killed
        proc.kill()
        code = proc.wait()
    err.seek(0)
    tail = [line for line in err.read().decode(errors="replace").splitlines() if line.strip()][-3:]
    detail = " | ".join(tail) if tail else "no output"
    why = f"the replay JVM stopped (exit code {code}) after {sent} events of this log: {detail}"
    if "OutOfMemoryError" in detail and limits is not None:
        why += (f"; its heap is capped at {limits.heap_mb} MB: give more with --jvm-heap-mb, or leave this log out "
                "(the logs beside it were imported)")  # fmt: skip
    return why
