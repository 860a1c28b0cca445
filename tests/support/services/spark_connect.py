"""A local Spark Connect server from the pyspark 4 installation, for the tests and the demo (issue 26).

``SparkConnectServerProcess`` runs ``org.apache.spark.sql.connect.service.SparkConnectServer`` through the
installation's ``spark-submit`` (what ``sbin/start-connect-server.sh`` runs, in the foreground), on ``local[N]``,
its gRPC endpoint bound to 127.0.0.1 on a free port, with any extra Spark conf (the sparktap listener's:
``sparktap.listener.spark_conf``). Clients connect with ``remote(user_id)``: ``sc://127.0.0.1:<port>/;user_id=alice``.
The client side needs ``pyspark[connect]`` (grpcio, grpcio-status, googleapis-common-protos, zstandard), which
``make setup`` installs.

``stop()`` sends SIGTERM: Spark's shutdown hook ends the application, so the listener's ``app_end`` and last events
are flushed before the JVM exits (``stop_timeout`` covers it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from sparktap.errors import ServiceError
from sparktap.local.ports import port_open
from sparktap.local.service import LocalService

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.sparktap.name = io.sparktap
logger.sparktap.level = info
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""


def spark_home() -> Path:
    """The installed pyspark's directory (its ``bin/spark-submit`` and ``jars/``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ServiceError("cannot start a Spark Connect server: pyspark is not installed here; run `make setup`")
    return Path(spec.origin).parent


def connect_jar(home: Path) -> Path | None:
    """The Spark Connect server jar of the installation (pyspark 4 ships it), or None."""
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    return jars[0] if jars else None


class SparkConnectServerProcess(LocalService):
    """One Spark Connect server (a Spark application on ``local[cores]``) on 127.0.0.1 and a free port."""

    service_name = "Spark Connect server"

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        conf: Mapping[str, str] | None = None,
        cores: int = 2,
        host: str = "127.0.0.1",
        start_timeout: float = 120.0,
        stop_timeout: float = 60.0,
    ) -> None:
        super().__init__(host=host, start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.conf = dict(conf or {})
        self.cores = cores
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-connect-")) if workdir is None else Path(workdir)
        self.port: int | None = None

    def remote(self, user_id: str | None = None) -> str:
        """The connection string of this server, for ``SparkSession.builder.remote(...)``."""
        if self.port is None:
            raise ServiceError("the Spark Connect server is not started: call start() first")
        return f"sc://{self.host}:{self.port}/" + (f";user_id={user_id}" if user_id else "")

    def _log_paths(self) -> list[Path]:
        return [self.workdir / "server.log"]

    def start(self) -> SparkConnectServerProcess:
        """Start the server and wait until its gRPC port accepts connections; returns self."""
        if self.running:
            return self
        home = spark_home()
        if connect_jar(home) is None:
            raise ServiceError(
                f'cannot start a Spark Connect server: no spark-connect jar under path="{home / "jars"}"; '
                'install pyspark 4 (pip install "pyspark[connect]>=4.0,<5", make setup)'
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)

        def attempt() -> None:
            (self.port,) = self.fresh_ports(1, self.host)
            conf = {
                "spark.master": f"local[{self.cores}]",
                "spark.app.name": "Spark Connect server",
                "spark.connect.grpc.binding.address": self.host,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.host": self.host,
                "spark.driver.bindAddress": self.host,
                "spark.ui.enabled": "false",
                "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}",
                **self.conf,
            }
            argv = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
            for key, value in conf.items():
                argv += ["--conf", f"{key}={value}"]
            env = {
                **os.environ,
                "SPARK_HOME": str(home),
                "SPARK_LOCAL_IP": self.host,
                "SPARK_CONF_DIR": str(self.workdir),
            }
            self._spawn(
                argv,
                log_path=self.workdir / "server.log",
                cwd=self.workdir,
                env=env,
                what=f'cannot run spark-submit path="{argv[0]}"',
                hint="install pyspark 4 and a Java 17 runtime (make setup)",
            )
            self._wait_ready(self._probe, f"Spark Connect server on {self.host}:{self.port}", interval=0.2)

        self._start_attempts(attempt, self.port_attempts)
        return self

    def _probe(self) -> bool:
        if self._exit_code() is not None:
            tail = self.log_tail()
            if "Address already in use" in tail or "BindException" in tail:
                from sparktap.local.service import PortTakenError

                raise PortTakenError(f"the Spark Connect server's port {self.port} was taken")
            raise ServiceError(f"the Spark Connect server exited with code {self._exit_code()}")
        return port_open(self.host, self.port or 0)

    def close(self) -> None:
        """Stop the server and delete its directory when this object created it."""
        self._terminate()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
