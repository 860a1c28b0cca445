"""A real single-node Apache Kafka broker (KRaft, combined broker and controller) for the tests and benchmarks.

The jars come from Maven Central through `mvn` (tests.support.services.maven, cached). `start()` formats the data
directory once, launches `kafka.Kafka` in its own process group on free ports and waits until the broker answers
a metadata request with its own cluster id. Unlike tansu it keeps its log on disk, so `restart()` is a real stop
and start that keeps every record; `pause()` (SIGSTOP) still simulates a stalled host.

>>> with ApacheKafkaBroker() as broker:
...     broker.create_topic("events", partitions=3)
...     broker.restart()  # records written before are still there
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from sparktap.errors import ServiceError
from sparktap.local.broker import BrokerProcess
from sparktap.local.service import PortTakenError
from tests.support.services import maven

KAFKA_VERSION = "4.1.0"
SCALA_VERSION = "2.13"
# The broker itself; slf4j-simple (matching the slf4j-api 1.7 Kafka depends on) sends its log to stderr.
ARTIFACTS = (f"org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION}", "org.slf4j:slf4j-simple:1.7.36")
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


def kafka_jars(install: bool = True) -> list[Path]:
    """The broker's jars (fetched with mvn on first use unless `install=False`)."""
    return maven.jars(f"kafka-{KAFKA_VERSION}", ARTIFACTS, install=install)


def _cluster_id() -> str:
    """A KRaft cluster id (a base64 UUID) that does not start with "-", which the format tool would take for a flag."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


class ApacheKafkaBroker(BrokerProcess):
    """One Apache Kafka process on `host` (KRaft, node id 1), its data in `directory` (a temp dir by default)."""

    service_name = "Apache Kafka broker"
    parent_death_signal = True  # a killed test run leaves no broker behind

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
        super().__init__(host=host, start_timeout=start_timeout, stop_timeout=stop_timeout, cluster_id=_cluster_id())
        self.config = {**BROKER_DEFAULTS, **(config or {})}
        self.jvm_options = jvm_options
        self._java = java
        self._directory = Path(directory) if directory is not None else None
        self._own_directory = directory is None
        self._controller_port: int | None = None

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

    def _log_paths(self) -> list[Path]:
        return [self.log_path]

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

        def attempt() -> None:
            if not fixed_ports:
                self._port, self._controller_port = self.fresh_ports(2, self.host)
                self._extra_ports()
            self._write_properties()
            if not (self.data_dir / "meta.properties").exists():
                self._format(jars)
            self._launch(jars)
            self._admin = None
            self._wait_ready(self._ready, f'Apache Kafka broker bootstrap="{self.bootstrap_servers}"', 0.1)

        self._start_attempts(attempt, 1 if fixed_ports else self.port_attempts)
        return self

    def _extra_ports(self) -> None:
        """Pick the ports of further listeners (a subclass's); called with the broker's own fresh ports."""

    def _properties_path(self) -> Path:
        return self.directory / "server.properties"

    def _listener_properties(self) -> dict[str, str]:
        port, controller = self.port, self._controller_port
        return {
            "listeners": f"PLAINTEXT://{self.host}:{port},CONTROLLER://{self.host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }

    def _write_properties(self) -> None:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self._controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self._listener_properties(),
            **self.config,
        }
        self._properties_path().write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def _java_command(self, jars: list[Path], main: str, *args: str) -> list[str]:
        java = self._java or shutil.which("java")
        if java is None:
            raise ServiceError("cannot start Apache Kafka: no `java` on PATH; install a JDK 17 (make setup does)")
        return [java, *self.jvm_options, "-cp", maven.classpath(jars), main, *args]

    def _format_arguments(self) -> list[str]:
        return ["format", "-t", self.cluster_id, "-c", str(self._properties_path())]

    def _format(self, jars: list[Path]) -> None:
        command = self._java_command(jars, "kafka.tools.StorageTool", *self._format_arguments())
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ServiceError(
                f'cannot format the Apache Kafka storage path="{self.data_dir}": StorageTool exited with code '
                f"{done.returncode}:\n{tail}"
            )

    def _launch(self, jars: list[Path]) -> None:
        command = self._java_command(jars, "kafka.Kafka", str(self._properties_path()))
        self._spawn(command, log_path=self.log_path, what=f'cannot run java for Apache Kafka command="{command[0]}"')

    def _ready(self) -> bool:
        code = self._exit_code()
        if code is not None:
            code_text = None if code == -1 else code
            message = f'Apache Kafka exited with code {code_text} while starting bootstrap="{self.bootstrap_servers}"'
            if _BIND_FAILED.search(self.log_tail(60)):
                raise PortTakenError(f"{message}: a port is already in use")
            raise ServiceError(message)
        return self._answers_metadata(self._admin_config())

    def _admin_config(self) -> dict[str, str | int | float]:
        """librdkafka settings of the readiness probe (a subclass with a secured listener adds its own)."""
        return {"log_level": 0}

    def _failure_context(self, exc: ServiceError) -> str:
        reason = self.first_error()
        why = f"; first error: {reason}" if reason else ""
        return f"{why}{super()._failure_context(exc)}"

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

    # -- helpers ----------------------------------------------------------------------------------------------

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
