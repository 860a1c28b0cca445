"""``sparktap import --engine spark``: the logs listed through Hadoop's FileSystem on the driver (``file://``,
``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``: whichever FileSystem classes the session's class path has), spread
over the executors (one task per log up to 4 per core, then ~64 MB of log per task, or ``--partitions`` tasks;
largest logs first), each task replaying its logs in its Python worker's replay JVM and writing from the executor
to Kafka or ClickHouse (``worker.py``). The driver keeps the checkpoint: a task's logs are recorded as soon as the
task has succeeded (its accumulator update), so a rerun after a failure or a kill reads only the logs of the tasks
that had not succeeded; what such a task had already sent is deduplicated by the storage, by the same
``(app_id, app_attempt, seq)`` keys as live events. docs/import.md.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import re
import sys
import threading
import time
from typing import IO, Any

from sparktap.errors import ConfigError, ServiceError
from sparktap.history import worker
from sparktap.history.checkpoint import Checkpoint, LogState
from sparktap.history.importer import Progress, Summary
from sparktap.history.sources import IN_PROGRESS, ROLLING_PREFIX, LogSource, Skipped, checked_source, describe
from sparktap.history.worker import Destination

__all__ = ["Destination", "check_destination", "list_logs", "name_key", "plan", "run"]

URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/")

CONNECTORS: dict[str, tuple[str, str]] = {
    "s3a": ("hadoop-aws (org.apache.hadoop.fs.s3a.S3AFileSystem)", "org.apache.hadoop:hadoop-aws:{hadoop}"),
    "gs": (
        "gcs-connector (com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem)",
        "com.google.cloud.bigdataoss:gcs-connector:3.1.7",
    ),
    "abfs": (
        "hadoop-azure (org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem)",
        "org.apache.hadoop:hadoop-azure:{hadoop}",
    ),
    "abfss": (
        "hadoop-azure (org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem)",
        "org.apache.hadoop:hadoop-azure:{hadoop}",
    ),
}
"""Schemes whose FileSystem Spark does not ship: the jar that has it, and its ``--packages`` coordinates."""


def check_destination(destination: Destination) -> None:
    """ConfigError when the executors cannot write there (an embedded chDB belongs to one process)."""
    if destination.storage_url is not None and destination.storage_url.startswith("chdb:"):
        raise ConfigError(
            "--engine spark writes from the executors: --storage-url is an embedded chDB (one process); use a "
            "clickhouse:// URL or --bootstrap-servers"
        )


def as_uri(path: str) -> str:
    """A local path as a ``file://`` URI; a URI as it is."""
    if URI.match(path):
        return path
    from pathlib import Path

    return Path(path).resolve().as_uri()


def missing_connector(scheme: str, hadoop_version: str, detail: str) -> str:
    jar, coordinates = CONNECTORS.get(scheme, ("", ""))
    if not jar:
        return (
            f'no Hadoop FileSystem for scheme="{scheme}" on the class path ({detail}): add the jar that provides it '
            f"with --packages GROUP:ARTIFACT:VERSION or --jars"
        )
    return (
        f'no Hadoop FileSystem for scheme="{scheme}": Spark does not ship its connector, {jar}; add it with '
        f"--packages {coordinates.format(hadoop=hadoop_version)} (or its jar with --jars)"
    )


def _local_check(status: Any, inside: str | None) -> str | Skipped | None:
    """A ``file:`` entry checked as the local engine checks it (``sources.checked_source``): its resolved path (two
    links to one log are one log), or why it is not read (a FIFO or device, a link out of ``inside``, a rolling log
    with such a member); None for another FileSystem (no FIFOs, devices or links there)."""
    uri = status.getPath().toUri()
    if str(uri.getScheme() or "file") != "file":
        return None
    local = str(uri.getPath())
    checked = checked_source(local, inside)
    return checked if isinstance(checked, Skipped) else checked.path


def list_logs(spark: Any, paths: list[str], follow_symlinks: bool = False) -> tuple[list[LogSource], list[Skipped]]:
    """The logs these paths and globs name, listed through Hadoop's FileSystem on the driver (as URIs). Local files
    get the local engine's checks before any reaches Spark (issue 41): only regular files (a FIFO would block the
    task that opens it, a device never ends), and a symbolic link in a listed directory must stay in it unless
    ``follow_symlinks``; a path named on the command line may be a link (it must still lead to a regular file)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j is how PySpark reaches Hadoop
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hadoop_version = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    found: list[LogSource] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def boundary(directory: Any) -> str | None:
        if follow_symlinks or str(directory.toUri().getScheme() or "file") != "file":
            return None
        return os.path.realpath(str(directory.toUri().getPath()))

    def add(fs: Any, status: Any, inside: str | None = None) -> None:
        uri = str(status.getPath().toUri().toString())
        local = _local_check(status, inside)
        if isinstance(local, Skipped):
            skipped.append(Skipped(uri, local.reason))
            return
        key = local or uri
        if key in seen or uri in seen:
            return
        if status.isDirectory():
            children = [c for c in fs.listStatus(status.getPath()) if _is_log_name(str(c.getPath().getName()))]
            size = sum(int(c.getLen()) for c in children)
            mtime = max((int(c.getModificationTime()) for c in children), default=0)
        else:
            size, mtime = int(status.getLen()), int(status.getModificationTime())
        seen.update((uri, key))
        found.append(LogSource(uri, size, mtime * 1_000_000))

    for arg in paths:
        uri = as_uri(arg)
        path = jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI(uri))
        try:
            fs = path.getFileSystem(conf)
        except Py4JJavaError as exc:
            scheme = uri.split(":", 1)[0].lower()
            skipped.append(Skipped(arg, missing_connector(scheme, hadoop_version, _java_message(exc))))
            continue
        try:
            matches = fs.globStatus(path)
        except Py4JJavaError as exc:
            skipped.append(Skipped(arg, f"cannot list it: {_java_message(exc)}"))
            continue
        if not matches:
            skipped.append(Skipped(arg, "no such file or directory, and no file matches this pattern"))
            continue
        for status in sorted(matches, key=lambda s: str(s.getPath().toString())):
            name = str(status.getPath().getName())
            if status.isDirectory() and not name.startswith(ROLLING_PREFIX):
                inside = boundary(status.getPath())
                entries = sorted(fs.listStatus(status.getPath()), key=lambda s: str(s.getPath().getName()))
                for entry in entries:
                    entry_name = str(entry.getPath().getName())
                    if not _is_log_name(entry_name) or (
                        entry.isDirectory() and not entry_name.startswith(ROLLING_PREFIX)
                    ):
                        continue
                    add(fs, entry, inside)
            else:  # a glob's match is an entry of its directory; a path named as it is, the user's own choice
                add(fs, status, boundary(status.getPath().getParent()) if glob.has_magic(arg) else None)
    return found, skipped


def _is_log_name(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(".crc")


def _java_message(exc: Any) -> str:
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _task_error(exc: BaseException) -> str:
    """The last meaningful line of a failed task's error (the worker's exception), not the whole traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error:" in line or "Exception:" in line:
            return line
    return lines[-1] if lines else type(exc).__name__


def _local_jars(spark: Any) -> list[str]:
    """The session's --jars / --packages as local files, for the replay JVMs the tasks start on this host."""
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    return [j.removeprefix("file:") for j in jars.split(",") if j and (j.startswith("file:") or j.startswith("/"))]


class _Progress:
    """The accumulator the tasks add their delivered logs to: ``(states, events, bytes)`` per task. The driver
    receives each update when its task succeeds, while the job still runs (PySpark's accumulator server)."""

    @staticmethod
    def zero(_value: list[Any]) -> list[Any]:
        return []

    @staticmethod
    def addInPlace(value1: list[Any], value2: list[Any]) -> list[Any]:  # noqa: N802 - PySpark's AccumulatorParam
        value1.extend(value2)
        return value1


TASK_BYTES = 64 << 20
"""Log bytes per task beyond 4 tasks per executor core. A task's fixed costs are Spark's scheduling and its one
delivery (an insert per table, or a producer flush); with a task per log they dominated: 200 small logs (66 MB) on 2
executors took 81 s as 200 tasks and 19 s as 8 (docs/benchmarks.md)."""


def default_tasks(todo: list[tuple[LogSource, LogState]], parallelism: int) -> int:
    """One task per log up to 4 per core (``parallelism``: the executors' cores), beyond that ~``TASK_BYTES``
    of log per task: the big logs spread, small ones share their tasks' fixed costs."""
    size = sum(log.size for log, _ in todo)
    return min(len(todo), max(4 * max(parallelism, 1), math.ceil(size / TASK_BYTES)))


CODEC_SUFFIXES = (".lz4", ".lzf", ".snappy", ".zstd")
"""The file name suffixes of Spark's event log codecs (``spark.eventLog.compression.codec``)."""


def name_key(path: str) -> str:
    """The application attempt a log's name says: Spark names a log ``<app id>[_<attempt>]``, with ``.inprogress``
    while it is written, its codec's suffix, and ``eventlog_v2_`` before a rolling log's directory. Copies of a log
    under the same name in other directories share it."""
    name = path.rstrip("/").rsplit("/", 1)[-1].removeprefix(ROLLING_PREFIX).removesuffix(IN_PROGRESS)
    for suffix in CODEC_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def plan(todo: list[tuple[LogSource, LogState]], tasks: int) -> list[list[tuple[LogSource, LogState]]]:
    """At most ``tasks`` groups of logs, largest first and dealt round-robin, so the big logs start first and no task
    gets all of them (Spark launches a job's tasks in partition order). Logs whose names say the same application
    attempt (``name_key``: a copy in another directory, the in-progress and the finished log) go to one task, whose
    importer keeps one copy (issue 39)."""
    same: dict[str, list[tuple[LogSource, LogState]]] = {}
    for item in sorted(todo, key=lambda item: (-item[0].size, item[0].path)):
        same.setdefault(name_key(item[0].path), []).append(item)
    units = sorted(same.values(), key=lambda unit: (-sum(log.size for log, _ in unit), unit[0][0].path))
    groups: list[list[tuple[LogSource, LogState]]] = [[] for _ in range(min(tasks, len(units)))]
    for i, unit in enumerate(units):
        groups[i % len(groups)].extend(unit)
    return groups


def known_attempts(checkpoint: Checkpoint, todo: list[tuple[LogSource, LogState]]) -> dict[str, LogState]:
    """The application attempts the checkpoint has from the logs not in this run, each under its log: every task's
    importer knows them, so a copy of a log imported earlier is skipped wherever it lands (issue 39)."""
    now = {log.path for log, _ in todo}
    return {
        path: LogState(attempts=dict(state.attempts))
        for path, state in checkpoint.logs.items()
        if state.attempts and path not in now
    }


def copies_across_tasks(states: dict[str, LogState]) -> list[Skipped]:
    """Application attempts this run imported from two logs (different names in two tasks: neither task saw the
    other's; a copy of a log of an earlier run each task skips itself, ``known_attempts``): one line each for the
    later log, naming the first. Their rows are in the store twice over; the line says what to do."""
    owners: dict[str, str] = {}
    out = []
    for path in sorted(states):
        for key in states[path].attempts:
            owner = owners.setdefault(key, path)
            if owner != path and name_key(owner) != name_key(path):
                app_id, _, attempt = key.partition("\t")
                out.append(
                    Skipped(
                        path,
                        f'app_id="{app_id}" app_attempt="{attempt}" was also imported from file="{describe(owner)}" '
                        "by another task of this run: one application, one copy (remove one copy, drop the "
                        "application's rows, and import again)",
                    )
                )
    return out


def run(
    spark: Any,
    paths: list[str],
    destination: Destination,
    checkpoint: Checkpoint,
    cluster: str | None = None,
    java_home: str | None = None,
    partitions: int | None = None,
    progress: IO[str] | None = None,
    follow_symlinks: bool = False,
) -> Summary:
    """Import on Spark: list on the driver, replay and write on the executors; the driver checkpoints each task's
    logs as soon as the task has succeeded (not at the end of the job), so a killed run resumes after them."""
    from pyspark.accumulators import AccumulatorParam

    check_destination(destination)
    started = time.monotonic()
    logs, skipped = list_logs(spark, paths, follow_symlinks)
    total = Summary(skipped=list(skipped))
    todo = []
    for log in logs:
        if checkpoint.unchanged(log.path, log.size, log.mtime_ns):
            total.unchanged.append(log.path)
        else:
            todo.append((log, checkpoint.state(log.path)))
    if todo:
        sc = spark.sparkContext
        groups = plan(todo, partitions or default_tasks(todo, int(sc.defaultParallelism)))
        previous = sc.pythonExec
        if str(sc.master).startswith("local"):
            sc.pythonExec = sys.executable  # the local workers import sparktap.history as this process does
        param: AccumulatorParam[list[Any]] = _Progress()  # type: ignore[assignment]
        delivered = sc.accumulator([], param)
        known = known_attempts(checkpoint, todo)
        task = functools.partial(
            worker.run_partition, destination, cluster, java_home, _local_jars(spark), delivered, known
        )
        shown = Progress(len(todo), progress or sys.stderr, (progress or sys.stderr).isatty())
        outcome: dict[str, Any] = {}

        def job() -> None:
            try:
                outcome["results"] = sc.parallelize(groups, len(groups)).mapPartitions(task).collect()
            except BaseException as exc:  # noqa: BLE001 - handed to the driver's thread below
                outcome["error"] = exc

        recorded = 0
        done = Summary()
        thread = threading.Thread(target=job, name="sparktap-import-job", daemon=True)
        try:
            thread.start()
            while thread.is_alive():
                thread.join(POLL_SECONDS)
                recorded = _record_delivered(checkpoint, delivered.value, recorded, done, shown)
        except BaseException:
            sc.cancelAllJobs()
            raise
        finally:
            sc.pythonExec = previous
            shown.done()
        if "error" in outcome:
            raise ServiceError(
                f"--engine spark: a task failed ({_task_error(outcome['error'])}); the logs of the tasks that "
                f"succeeded are checkpointed ({recorded} of {len(todo)}): run the import again once the cause is "
                "fixed, it resumes after them (what a failed task had already sent is deduplicated by the storage)"
            )
        states: dict[str, LogState] = {}
        for summary, task_states in outcome["results"]:
            _merge(total, summary)
            states.update(task_states)
        checkpoint.record_many(states)
        total.twice += copies_across_tasks(states)
    total.seconds = time.monotonic() - started
    return total


POLL_SECONDS = 0.5
"""How often the driver checkpoints the logs of the tasks that succeeded meanwhile (one checkpoint write each time)."""


def _record_delivered(
    checkpoint: Checkpoint, delivered: list[Any], recorded: int, done: Summary, shown: Progress
) -> int:
    """Checkpoint the logs of the task updates from ``recorded`` on, in one write; the new count."""
    new = delivered[recorded:]
    if not new:
        return recorded
    states: dict[str, LogState] = {}
    for task_states, events, size in new:
        states.update(task_states)
        done.logs += len(task_states)
        done.bytes += size
        done.events["all"] += events
    checkpoint.record_many(states)
    shown.show(done, done.events["all"], force=True)
    return recorded + len(new)


def _merge(total: Summary, part: Summary) -> None:
    total.logs += part.logs
    total.applications |= part.applications
    total.events.update(part.events)
    total.bytes += part.bytes
    total.batches += part.batches
    total.inserts += part.inserts
    total.skipped += part.skipped
    total.stopped += part.stopped
    total.unchanged += part.unchanged
    total.live += part.live
    for reason, n in part.rejected.items():
        total.rejected[reason] = total.rejected.get(reason, 0) + n
