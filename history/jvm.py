"""The replay JVM: ``io.sparktap.listener.ReplayMain`` from the listener jar of the installed Spark's line, on that
Spark's jars (``$SPARK_HOME/jars``, else the pyspark installation's), run by ``$JAVA_HOME/bin/java`` or ``java``."""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess  # noqa: S404 - the replay JVM is the process this module exists to run
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparktap.errors import ConfigError
from sparktap.listener import javabuild

MAIN_CLASS = "io.sparktap.listener.ReplayMain"
LOG4J = """status = error
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.replay.name = org.apache.spark.scheduler.ReplayListenerBus
logger.replay.level = off
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
"""
"""ReplayListenerBus logs each malformed line with a stack trace: ReplayMain reports it in one line instead."""
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""The replay JVM is short-lived and single-threaded: the C1 compiler only and the serial collector halve its CPU on
logs of tens of MB (bench/import_throughput.py, docs/benchmarks.md)."""
BIG_JVM_OPTIONS = ("-XX:+UseSerialGC",)
"""For a run of ``BIG_BYTES`` of logs or more: C2 as well (its compiled code pays for its compilation over a long
replay: 16.8 s of CPU with C1 only, 14.9 s with C2 on a 1 GB log), still the serial collector."""
BIG_BYTES = 512 << 20
"""``SPARKTAP_IMPORT_JVM_OPTIONS`` replaces either (e.g. ``-XX:+UseG1GC`` alone; ``""``: the JVM's own defaults); the
heap cap (``Limits``) stays in front of them, so an ``-Xmx`` there wins."""
MAX_LINE_MB = 64
"""A line of a log longer than this stops that log (``--max-line-mb``): a 90 KB zstd file can hold a 2 GiB line, and
the replay holds a whole line (and Spark its parsed JSON) in memory. Spark's own lines are kilobytes; the longest
real ones (a SQL plan, a job's properties) stay far below."""
HEAP_MB = 2048
"""The replay JVM's heap cap (``--jvm-heap-mb``): without one the JVM takes a quarter of the machine. Enough for a
line at the cap parsed by Spark's JsonProtocol and the listener's state of a large application; a log that needs
more fails alone, named, and the logs beside it are imported."""


@dataclass(frozen=True)
class Limits:
    """What one log may cost the replay JVM."""

    max_line_bytes: int = MAX_LINE_MB << 20
    heap_mb: int = HEAP_MB


PATH_REQUEST = 0
"""ReplayMain's request kinds: a path it opens itself (a URI, through Hadoop's FileSystem) ..."""
OPENED_REQUEST = 1
"""... or a local log's files, opened and checked by the importer (``sources.open_log``), read by it through /proc."""


def framed(data: bytes) -> bytes:
    """A length-prefixed field of a request to ReplayMain (its class comment: no separator a name could hold)."""
    return struct.pack(">i", len(data)) + data


def path_request(request_id: int, path: str) -> bytes:
    """The request to replay the log at ``path`` (a URI, or a local path the JVM opens itself)."""
    return struct.pack(">qB", request_id, PATH_REQUEST) + framed(os.fsencode(path))


def jvm_options(total_bytes: int = 0) -> list[str]:
    """The replay JVM's options for a run of ``total_bytes`` of logs (0: unknown, small)."""
    override = os.environ.get("SPARKTAP_IMPORT_JVM_OPTIONS")
    if override is not None:
        return shlex.split(override)
    return list(BIG_JVM_OPTIONS if total_bytes >= BIG_BYTES else JVM_OPTIONS)


@dataclass(frozen=True)
class ReplayJvm:
    java: str
    classpath: str
    spark_version: str
    jar: Path

    def command(self, log4j: Path, cluster: str | None, total_bytes: int = 0, limits: Limits = Limits()) -> list[str]:
        # ExitOnOutOfMemoryError: a JVM that ran out of heap is not trusted with the next log; the importer names
        # the log it was on and starts a fresh one for the rest. The VM's own messages (that one included) go to
        # stderr: stdout is the event stream
        cmd = [self.java, f"-Xmx{limits.heap_mb}m", "-XX:+ExitOnOutOfMemoryError",
               "-XX:+DisplayVMOutputToStderr", *jvm_options(total_bytes),
               "-Xss4m", f"-Dlog4j2.configurationFile={log4j.as_uri()}", "-cp", self.classpath, MAIN_CLASS,
               "--max-line-bytes", str(limits.max_line_bytes)]  # fmt: skip
        if cluster is not None:
            cmd += ["--cluster", cluster]
        return cmd


def _java(java_home: str | None) -> str:
    home = java_home or os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ConfigError(
            "sparktap import needs a Java runtime: no java on PATH and no JAVA_HOME; install a JDK 17 "
            "(Debian: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
        )
    return found


def find(java_home: str | None = None, extra_classpath: list[str] | None = None) -> ReplayJvm:
    """The JVM for this installation's Spark; ConfigError (one line, how to fix) when there is none.
    ``extra_classpath``: more jars (e.g. a Hadoop FileSystem connector for ``--engine spark``)."""
    found = javabuild._pyspark_jars()  # noqa: SLF001 - the one place that knows where Spark's jars are
    if found is None:
        raise ConfigError(
            "sparktap import replays logs with Spark's own classes: install pyspark (pip install pyspark) or set "
            "SPARK_HOME to a Spark 3.3+ distribution"
        )
    version, jars = found
    try:
        line = javabuild.line_for(version)
    except javabuild.JavaBuildError as exc:
        raise ConfigError(str(exc)) from None
    jar = javabuild.JAR_DIR / line.jar_name
    if not jar.is_file():
        try:
            jar = javabuild.build_jar(line)
        except javabuild.JavaBuildError as exc:
            raise ConfigError(f"the listener jar {line.jar_name} is missing and cannot be built: {exc}") from None
    classpath = os.pathsep.join([f"{jars}/*", str(jar), *(extra_classpath or [])])
    return ReplayJvm(_java(java_home), classpath, version, jar)


def start(
    jvm: ReplayJvm, cluster: str | None, scratch: Path, total_bytes: int = 0, limits: Limits = Limits()
) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """The running JVM and the file its stderr goes to (shown when it fails); ``total_bytes``: of the logs it will
    replay (its options: ``jvm_options``)."""
    log4j = scratch / "log4j2-replay.properties"
    log4j.write_text(LOG4J, encoding="utf-8")
    err = tempfile.TemporaryFile(dir=scratch)
    proc = subprocess.Popen(  # noqa: S603 - our own command line
        jvm.command(log4j, cluster, total_bytes, limits),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        bufsize=1 << 16,
    )
    return proc, err


class ReplayProcess:
    """A running replay JVM with its scratch directory: fed logs one at a time, then closed. The local engine runs
    one per import; on Spark each Python worker keeps one across its tasks (``sparktap.history.worker``)."""

    def __init__(self, jvm: ReplayJvm, cluster: str | None, total_bytes: int = 0, limits: Limits = Limits()) -> None:
        self._scratch = tempfile.mkdtemp(prefix="sparktap-import-")
        self.limits = limits
        self.proc, self.err = start(jvm, cluster, Path(self._scratch), total_bytes, limits)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop the JVM now (a stuck read, a stop past its grace): what it was replaying ends with EOF."""
        if self.proc.poll() is None:
            self.proc.kill()

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass  # the JVM already went: its pipe is broken
        try:
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a JVM that does not exit is killed
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        shutil.rmtree(self._scratch, ignore_errors=True)
