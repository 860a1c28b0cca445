"""``sparktap import --engine spark``: the logs listed through Hadoop's FileSystem on the driver (``file://``,
``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``: whichever FileSystem classes the session's class path has), spread
over the executors one task per log (at most ``--partitions`` tasks), each task running the replay JVM on its
logs and writing from the executor to Kafka or ClickHouse. The driver keeps the checkpoint: a log is recorded once
its task has delivered it, so a rerun after a failure reads only what is not recorded (and what a killed task had
already sent is deduplicated by the storage, by the same keys as live events). docs/import.md.
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sparktap.errors import ConfigError, ServiceError
from sparktap.history.checkpoint import Checkpoint, LogState
from sparktap.history.importer import Importer, Summary
from sparktap.history.sources import ROLLING_PREFIX, LogSource, Skipped

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


@dataclass(frozen=True)
class Destination:
    """Where the executors write (what each task opens its own sink from)."""

    storage_url: str | None
    bootstrap_servers: str | None
    topic: str
    live_check_url: str | None
    retention_days: int


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


def list_logs(spark: Any, paths: list[str]) -> tuple[list[LogSource], list[Skipped]]:
    """The logs these paths and globs name, listed through Hadoop's FileSystem on the driver (as URIs)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j is how PySpark reaches Hadoop
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hadoop_version = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    found: list[LogSource] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def add(fs: Any, status: Any) -> None:
        uri = str(status.getPath().toUri().toString())
        if uri in seen:
            return
        if status.isDirectory():
            children = [c for c in fs.listStatus(status.getPath()) if _is_log_name(str(c.getPath().getName()))]
            size = sum(int(c.getLen()) for c in children)
            mtime = max((int(c.getModificationTime()) for c in children), default=0)
        else:
            size, mtime = int(status.getLen()), int(status.getModificationTime())
        seen.add(uri)
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
                entries = sorted(fs.listStatus(status.getPath()), key=lambda s: str(s.getPath().getName()))
                for entry in entries:
                    entry_name = str(entry.getPath().getName())
                    if not _is_log_name(entry_name) or (
                        entry.isDirectory() and not entry_name.startswith(ROLLING_PREFIX)
                    ):
                        continue
                    add(fs, entry)
            else:
                add(fs, status)
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


def _task(destination: Destination, cluster: str | None, java_home: str | None, classpath: list[str]) -> Any:
    def run(items: Iterable[tuple[LogSource, LogState]]) -> Iterator[tuple[Summary, dict[str, LogState]]]:
        from sparktap.history.sinks import KafkaSink, LiveCheck, Sink, StorageSink

        batch = list(items)
        if not batch:
            return
        sink: Sink
        live: LiveCheck | None
        if destination.storage_url is not None:
            storage_sink = StorageSink(destination.storage_url, destination.retention_days)
            sink, live = storage_sink, storage_sink.live
        else:
            assert destination.bootstrap_servers is not None  # noqa: S101 - the CLI requires one destination
            live = (
                LiveCheck.open(destination.live_check_url, destination.retention_days)
                if destination.live_check_url
                else None
            )
            sink = KafkaSink(destination.bootstrap_servers, destination.topic, {}, live)
        checkpoint = Checkpoint(None)
        for log, state in batch:
            checkpoint.logs[log.path] = state
        try:
            importer = Importer(sink, checkpoint, live, cluster, java_home, io.StringIO(), classpath)
            summary = importer.run_logs([log for log, _ in batch], [])
        finally:
            sink.close()
        yield summary, {log.path: checkpoint.logs[log.path] for log, _ in batch if log.path in checkpoint.logs}

    return run


def run(
    spark: Any,
    paths: list[str],
    destination: Destination,
    checkpoint: Checkpoint,
    cluster: str | None = None,
    java_home: str | None = None,
    partitions: int | None = None,
) -> Summary:
    """Import on Spark: list on the driver, replay and write on the executors, checkpoint on the driver."""
    check_destination(destination)
    started = time.monotonic()
    logs, skipped = list_logs(spark, paths)
    total = Summary(skipped=list(skipped))
    todo = []
    for log in logs:
        if checkpoint.unchanged(log.path, log.size, log.mtime_ns):
            total.unchanged.append(log.path)
        else:
            todo.append((log, checkpoint.state(log.path)))
    if todo:
        slices = min(len(todo), partitions or len(todo))
        sc = spark.sparkContext
        previous = sc.pythonExec
        if str(sc.master).startswith("local"):
            sc.pythonExec = sys.executable  # the local workers import sparktap.history as this process does
        try:
            rdd = sc.parallelize(todo, slices)
            results = rdd.mapPartitions(_task(destination, cluster, java_home, _local_jars(spark))).collect()
        except Exception as exc:  # noqa: BLE001 - a task's failure comes back as Spark's wrapped traceback
            raise ServiceError(
                f"--engine spark: a task failed ({_task_error(exc)}); nothing of this run was checkpointed: run the "
                "import again once the cause is fixed (what was already sent is deduplicated by the storage)"
            ) from None
        finally:
            sc.pythonExec = previous
        for summary, states in results:
            _merge(total, summary)
            for name, state in states.items():
                checkpoint.record(name, state)
    total.seconds = time.monotonic() - started
    return total


def _merge(total: Summary, part: Summary) -> None:
    total.logs += part.logs
    total.applications |= part.applications
    total.events.update(part.events)
    total.bytes += part.bytes
    total.skipped += part.skipped
    total.stopped += part.stopped
    total.unchanged += part.unchanged
    total.live += part.live
    for reason, n in part.rejected.items():
        total.rejected[reason] = total.rejected.get(reason, 0) + n
