"""What a ``sparktap import --engine spark`` task runs on an executor (``engine_spark.py`` plans the tasks).

A PySpark worker process runs the tasks of its executor one after another (``spark.python.worker.reuse``, on by
default), so it keeps its replay JVM and its sink (a ClickHouse connection with the schema prepared once, or a Kafka
producer) from one task to the next: a task of one small log then costs its replay and one insert, not a JVM
start-up and the schema's DDL. Anything that fails drops both, and the next task starts fresh ones. The worker's
logs are delivered (the sink flushed) once per task, before the task returns what it sent: the driver checkpoints
a log only when its task has succeeded. When the worker process ends, the replay JVM reads EOF on its stdin and
exits.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sparktap.history.checkpoint import Checkpoint, LogState
from sparktap.history.importer import Importer, Summary
from sparktap.history.sinks import BATCH_BYTES, LiveCheck, Sink
from sparktap.history.sources import LogSource


@dataclass(frozen=True)
class Destination:
    """Where the executors write (what each task opens its own sink from)."""

    storage_url: str | None
    bootstrap_servers: str | None
    topic: str
    live_check_url: str | None
    retention_days: int
    batch_bytes: int = BATCH_BYTES
    """each task's sink delivers what it holds at this many bytes of events (``--batch-mb``), across its logs"""
    each_log: bool = False
    """``--batch-mb 0``: a delivery per log"""


@dataclass
class _Kept:
    key: tuple[Any, ...]
    sink: Sink
    live: LiveCheck | None
    replay: Any  # jvm.ReplayProcess


_kept: _Kept | None = None
"""This worker process's replay JVM and sink, for the tasks that follow."""


def _open_sink(destination: Destination) -> tuple[Sink, LiveCheck | None]:
    from sparktap.history.sinks import KafkaSink, StorageSink

    if destination.storage_url is not None:
        storage_sink = StorageSink(destination.storage_url, destination.retention_days, destination.batch_bytes)
        return storage_sink, storage_sink.live
    assert destination.bootstrap_servers is not None  # noqa: S101 - the CLI requires one destination
    live = (
        LiveCheck.open(destination.live_check_url, destination.retention_days) if destination.live_check_url else None
    )
    return KafkaSink(destination.bootstrap_servers, destination.topic, {}, live, destination.batch_bytes), live


def _acquire(destination: Destination, cluster: str | None, java_home: str | None, classpath: list[str]) -> _Kept:
    from sparktap.history import jvm as replay_jvm

    global _kept  # noqa: PLW0603 - one per worker process, by design
    key = (destination, cluster, java_home, tuple(classpath))
    if _kept is not None and (_kept.key != key or not _kept.replay.alive()):
        _drop()
    if _kept is None:
        sink, live = _open_sink(destination)
        try:
            replay = replay_jvm.ReplayProcess(replay_jvm.find(java_home, classpath), cluster)
        except BaseException:
            sink.close()
            raise
        _kept = _Kept(key, sink, live, replay)
    return _kept


def _drop() -> None:
    global _kept  # noqa: PLW0603
    kept, _kept = _kept, None
    if kept is None:
        return
    try:
        kept.replay.close()
    finally:
        kept.sink.close()


def run_partition(
    destination: Destination,
    cluster: str | None,
    java_home: str | None,
    classpath: list[str],
    progress: Any,
    known: dict[str, LogState],
    groups: Iterable[list[tuple[LogSource, LogState]]],
) -> Iterator[tuple[Summary, dict[str, LogState]]]:
    """One task: replay its logs, deliver them, add their checkpoint states to ``progress`` (an accumulator the
    driver reads while the job runs) and yield the task's summary and states. ``known``: the application attempts
    of the checkpoint's other logs, so the importer skips a copy of one of them."""
    batch = [item for group in groups for item in group]
    if not batch:
        return
    kept = _acquire(destination, cluster, java_home, classpath)
    rejected_before = kept.sink.rejected()
    batches, inserts = kept.sink.batches, kept.sink.inserts
    checkpoint = Checkpoint(None)
    checkpoint.logs.update(known)
    for log, state in batch:
        checkpoint.logs[log.path] = state
    try:
        importer = Importer(kept.sink, checkpoint, kept.live, cluster, java_home, io.StringIO(), classpath,
                            replay=kept.replay, deliver=False, each_log=destination.each_log)  # fmt: skip
        summary = importer.run_logs([log for log, _ in batch], [])
        kept.sink.flush()
        summary.batches, summary.inserts = kept.sink.batches - batches, kept.sink.inserts - inserts
    except BaseException:
        _drop()  # the JVM may be mid-log and the sink may hold undelivered events: start afresh next time
        raise
    summary.rejected = {
        reason: n - rejected_before.get(reason, 0)
        for reason, n in kept.sink.rejected().items()
        if n > rejected_before.get(reason, 0)
    }
    states = {log.path: checkpoint.logs[log.path] for log, _ in batch if log.path in checkpoint.logs}
    if progress is not None:
        progress.add([(states, sum(summary.events.values()), summary.bytes)])
    yield summary, states
