"""A real single-node Apache Kafka broker (KRaft, combined broker and controller) for the tests and benchmarks.

The jars come from Maven Central through `mvn` (sparktap.local.maven, cached). `start()` formats the data
directory once, launches `kafka.Kafka` in its own process group on free ports and waits until the broker answers
a metadata request with its own cluster id. Unlike tansu it keeps its log on disk, so `restart()` is a real stop
and start that keeps every record; `pause()` (SIGSTOP) still simulates a stalled host.

>>> with ApacheKafkaBroker() as broker:
...     broker.create_topic("events", partitions=3)
...     broker.restart()  # records written before are still there
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from confluent_kafka.admin import AdminClient

from sparktap.errors import ServiceError
from sparktap.local import maven
from sparktap.local.broker import create_topic
from sparktap.local.ports import free_port, port_open, wait_until

KAFKA_VERSION = "4.1.0"
SCALA_VERSION = "2.13"
# The broker itself; slf4j-simple (matching the slf4j-api 1.7 Kafka depends on) sends its log to stderr.
ARTIFACTS = (f"org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION}", "org.slf4j:slf4j-simple:1.7.36")
_PORT_ATTEMPTS = 3
_BIND_FAILED = re.compile(r"BindException|Address already in use")
_ERROR_LINE = re.compile(r"\bERROR\b|Exception\b")

# Single-node settings: internal topics with one replica and one partition, no delay before the first rebalance,
# the log cleaner checking often (compaction shows within seconds). Anything can be overridden per broker.
BROKER_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    # a node frozen for a while (SIGSTOP, the outage tests' 30 s) must not fence itself when it resumes: past the
    # 9 s default its controller fences its broker, every partition loses its leader until it is elected again,
    # and clients can take minutes to find them back
    "broker.session.timeout.ms": "60000",
}
JVM_DEFAULTS = ("-Xms256m", "-Xmx1g", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")


class _PortTakenError(ServiceError):
    """Something else took a port between free_port() and the broker's bind: try other ports."""


def kafka_jars(install: bool = True) -> list[Path]:
    """The broker's jars (fetched with mvn on first use unless `install=False`)."""
    return maven.jars(f"kafka-{KAFKA_VERSION}", ARTIFACTS, install=install)


def _cluster_id() -> str:
    """A KRaft cluster id (a base64 UUID) that does not start with "-", which the format tool would take for a flag."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


class ApacheKafkaBroker:
    """One Apache Kafka process on `host` (KRaft, node id 1), its data in `directory` (a temp dir by default)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        directory: Path | str | None = None,
        config: Mapping[str, str] | None = None,
        jvm_options: tuple[str, ...] = JVM_DEFAULTS,
        start_timeout: float = 90.0,
        stop_timeout: float = 30.0,
        java: str | None = None,
    ) -> None:
        self.host = host
        self.config = {**BROKER_DEFAULTS, **(config or {})}
        self.jvm_options = jvm_options
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._java = java
        self._directory = Path(directory) if directory is not None else None
        self._own_directory = directory is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._port: int | None = None
        self._controller_port: int | None = None
        self._paused = False
        self._log_start = 0
        self._finalizer: weakref.finalize[..., ApacheKafkaBroker] | None = None
        self.cluster_id = _cluster_id()

    # -- properties -------------------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        if self._directory is None:
            raise ServiceError("the Apache Kafka broker is not started: call start() first")
        return self._directory

    @property
    def data_dir(self) -> Path:
        """The broker's `log.dirs` (its records)."""
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        """The broker's stdout and stderr (its log4j/slf4j log)."""
        return self.directory / "broker.log"

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError("the Apache Kafka broker is not started: call start() first")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServiceError("the Apache Kafka broker is not running: call start() first")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def is_paused(self) -> bool:
        return self._paused

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> ApacheKafkaBroker:
        """Launch the broker (formatting its storage the first time) and wait until it serves metadata.

        After `stop_keeping_data()` (or `restart()`) it comes back on the same ports with the same records.
        """
        if self.running:
            raise ServiceError(f'the Apache Kafka broker is already running bootstrap="{self.bootstrap_servers}"')
        jars = kafka_jars()
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="sparktap-kafka-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        fixed_ports = self._port is not None  # a restart keeps the ports clients know
        attempts = 1 if fixed_ports else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if not fixed_ports:
                self._port, self._controller_port = free_port(self.host), free_port(self.host)
            self._write_properties()
            if not (self.data_dir / "meta.properties").exists():
                self._format(jars)
            try:
                self._launch(jars)
                self._wait_ready()
            except ServiceError as exc:
                self._terminate()
                if isinstance(exc, _PortTakenError) and attempt < attempts:
                    continue
                raise  # the log stays where the message says, for diagnosis
            return self
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt returns or raises

    def _properties_path(self) -> Path:
        return self.directory / "server.properties"

    def _write_properties(self) -> None:
        port, controller = self.port, self._controller_port
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{controller}",
            "listeners": f"PLAINTEXT://{self.host}:{port},CONTROLLER://{self.host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.config,
        }
        self._properties_path().write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def _java_command(self, jars: list[Path], main: str, *args: str) -> list[str]:
        java = self._java or shutil.which("java")
        if java is None:
            raise ServiceError("cannot start Apache Kafka: no `java` on PATH; install a JDK 17 (make setup does)")
        return [java, *self.jvm_options, "-cp", maven.classpath(jars), main, *args]

    def _format(self, jars: list[Path]) -> None:
        command = self._java_command(
            jars, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(self._properties_path())
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ServiceError(
                f'cannot format the Apache Kafka storage path="{self.data_dir}": StorageTool exited with code '
                f"{done.returncode}:\n{tail}"
            )

    def _launch(self, jars: list[Path]) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _terminate()
        self._log_start = self._log.tell()  # where this launch's lines begin (the log is appended to)
        command = self._java_command(jars, "kafka.Kafka", str(self._properties_path()))
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - fixed java command, no shell
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() signals the group
                preexec_fn=_parent_death_signal(),  # only prctl between fork and exec
            )
        except OSError as exc:
            raise ServiceError(f'cannot run java for Apache Kafka command="{command[0]}": {exc}') from exc
        self._finalizer = weakref.finalize(self, _kill_group, self._proc, 5.0)

    def _wait_ready(self) -> None:
        admin: list[AdminClient] = []

        def ready() -> bool:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                message = f'Apache Kafka exited with code {code} while starting bootstrap="{self.bootstrap_servers}"'
                if _BIND_FAILED.search(self.log_tail(60)):
                    raise _PortTakenError(f"{message}: a port is already in use")
                raise ServiceError(message)
            if not port_open(self.host, self.port):
                return False
            if not admin:
                admin.append(AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0}))
            metadata = admin[0].list_topics(timeout=1.0)
            if metadata.cluster_id != self.cluster_id:
                raise _PortTakenError(
                    f'another Kafka broker answered on bootstrap="{self.bootstrap_servers}" '
                    f'cluster_id="{metadata.cluster_id}" instead of the Apache Kafka broker just started'
                )
            return bool(metadata.brokers)

        try:
            wait_until(ready, self.start_timeout, f'Apache Kafka broker bootstrap="{self.bootstrap_servers}"', 0.1)
        except ServiceError as exc:
            reason = self.first_error()
            why = f"; first error: {reason}" if reason else ""
            raise type(exc)(f'{exc}{why}; log path="{self.log_path}" ends with:\n{self.log_tail()}') from exc

    def stop_keeping_data(self) -> None:
        """Stop the broker cleanly (SIGTERM to its process group, SIGKILL after stop_timeout); records stay."""
        self._terminate()

    def restart(self) -> None:
        """A real restart: stop, then start on the same ports with the same data."""
        self.stop_keeping_data()
        self.start()

    def stop(self) -> None:
        """Stop the broker and remove its data (and its directory when it made it). Safe to call twice."""
        self._terminate()
        if self._directory is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self._own_directory:
                shutil.rmtree(self._directory, ignore_errors=True)
                self._directory = None

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            _kill_group(proc, self.stop_timeout)
            self._proc = None
            self._paused = False
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ApacheKafkaBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- outages ----------------------------------------------------------------------------------------------

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP to its process group): connections stay open but nothing answers."""
        os.killpg(self.pid, signal.SIGSTOP)
        self._paused = True
        wait_until(lambda: _proc_state(self.pid) in ("T", "t", None), 5.0, f"SIGSTOP of Apache Kafka pid={self.pid}")

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)
        self._paused = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[ApacheKafkaBroker]:
        """`with broker.paused(): ...` — frozen inside the block, resumed on the way out."""
        self.pause()
        try:
            yield self
        finally:
            if self.running:
                self.resume()

    # -- helpers ----------------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
        create_topic(self.bootstrap_servers, name, partitions, timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, ServiceError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def first_error(self) -> str | None:
        """The first ERROR or exception line the current (or last) launch logged (with its cause), or None."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                text = log.read().decode(errors="replace")
        except (OSError, ServiceError):
            return None
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if _ERROR_LINE.search(line):
                cause = lines[i + 1].strip() if i + 1 < len(lines) else ""
                # an ERROR line is often followed by the exception that says why
                return f"{line.strip()}: {cause}" if cause and not cause.startswith(("at ", "[")) else line.strip()
        return None

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self._port is not None else "not started"
        return f"ApacheKafkaBroker({where}, running={self.running}, paused={self._paused})"


def _kill_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGCONT and SIGTERM to the process group (a clean Kafka shutdown), SIGKILL to it after `timeout`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def _parent_death_signal() -> Callable[[], None] | None:
    """For the child between fork and exec: SIGTERM it when the process that started it dies, so a killed test run
    leaves no broker behind. Linux sends it when the *thread* that started the broker ends: start (and restart) it
    from a thread that outlives it, such as the main thread. libc is loaded here, in the parent. None (nothing to
    do) where prctl is missing."""
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_signal


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]
