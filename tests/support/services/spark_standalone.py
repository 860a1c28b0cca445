"""A throwaway Spark standalone cluster on 127.0.0.1: a Master and Workers started from a pyspark installation.

``SparkStandaloneCluster(workers=2).start()`` runs ``org.apache.spark.deploy.master.Master`` and one
``org.apache.spark.deploy.worker.Worker`` per worker with ``java -cp <pyspark>/jars/*`` (what ``spark-class`` would
run), each in its own process group on free ports, bound to 127.0.0.1, and waits (polling the Master's
``/json/`` page against a deadline) until every Worker is registered ALIVE. ``SPARK_HOME`` is the pyspark
directory, so the Workers launch executors as separate JVMs from the same jars. Applications connect to
``cluster.master_url`` (``spark://127.0.0.1:<port>``). The Master, the Workers and their executors run on the
``java`` of ``JAVA_HOME`` (else on PATH): Spark 4 needs Java 17.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port
from sparktap.local.service import LocalService

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def pyspark_home() -> Path | None:
    """The directory of the importable pyspark (its ``jars/`` hold Spark), or None when there is none."""
    try:
        import pyspark
    except ImportError:
        return None
    home = Path(pyspark.__file__).resolve().parent
    return home if (home / "jars").is_dir() else None


def scala_binary(home: Path) -> str:
    """The Scala binary version of the jars (``2.13``), which Spark's launcher wants in ``SPARK_SCALA_VERSION`` when
    it builds an executor's command outside a source tree (``bin/load-spark-env.sh`` sets it for spark-class)."""
    for jar in sorted((home / "jars").glob("scala-library-*.jar")):
        parts = jar.name[len("scala-library-") :].split(".")
        if len(parts) >= 2:
            return f"{parts[0]}.{parts[1]}"
    return "2.13"


def java_binary() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    return shutil.which("java")


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http://127.0.0.1 only
        return json.loads(response.read())


class _SparkDaemon(LocalService):
    """One Master or Worker JVM."""

    def __init__(self, name: str, workdir: Path, *, start_timeout: float = 60.0) -> None:
        super().__init__(host="127.0.0.1", start_timeout=start_timeout, stop_timeout=15.0)
        self.name = name
        self.service_name = f"Spark standalone {name}"  # type: ignore[misc]  # per instance, for messages
        self.workdir = workdir

    def _log_paths(self) -> list[Path]:
        return [self.workdir / f"{self.name}.log"]

    def launch(self, main: str, args: list[str], home: Path, java: str, heap: str = "256m") -> None:
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "SPARK_SCALA_VERSION": scala_binary(home)}  # fmt: skip
        env.pop("PYSPARK_GATEWAY_PORT", None)
        # a daemon does little work: the C1 compiler and the serial collector start it faster on a busy machine
        fast = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        argv = [java, f"-Xmx{heap}", *fast, "-cp", f"{home}/jars/*", main, *args]
        self._spawn(argv, log_path=self._log_paths()[0], cwd=self.workdir, env=env,
                    what=f"cannot start the {self.service_name}", hint="is a JDK installed?")  # fmt: skip

    def exited(self) -> str | None:
        code = self._exit_code()
        if code is None:
            return None
        return f'the {self.service_name} exited (code {code}); log path="{self._log_paths()[0]}":\n{self.log_tail()}'

    def start(self) -> _SparkDaemon:
        return self


class SparkStandaloneCluster:
    """A Master and ``workers`` Workers (``cores`` and ``memory`` each) on 127.0.0.1."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        workdir: Path | None = None,
        start_timeout: float = 90.0,
    ) -> None:
        self.workers_wanted = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-standalone-")) if workdir is None else Path(workdir)
        self.master = _SparkDaemon("master", self.workdir, start_timeout=start_timeout)
        self.workers = [_SparkDaemon(f"worker-{i}", self.workdir, start_timeout=start_timeout) for i in range(workers)]
        self.port: int | None = None
        self.web_port: int | None = None

    @property
    def master_url(self) -> str:
        if self.port is None:
            raise ServiceError("the Spark standalone cluster is not started: call start() first")
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def state(self) -> dict[str, Any]:
        """The Master's ``/json/`` page (workers, applications)."""
        return dict(_get_json(f"{self.web_url}/json/"))

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except (OSError, urllib.error.URLError, ValueError):
            return 0

    def start(self) -> SparkStandaloneCluster:
        if self.master.running:
            return self
        home = pyspark_home()
        java = java_binary()
        if home is None or java is None:
            raise ServiceError(
                f"cannot start a Spark standalone cluster: pyspark_home={home} java={java}; install pyspark "
                "(pip install 'sparktap[spark]') and a JDK 17 (.ci/system-deps.sh)"
            )
        self.port, self.web_port = free_port(), free_port()
        self.master.launch(MASTER_CLASS, ["--host", "127.0.0.1", "--port", str(self.port),
                                          "--webui-port", str(self.web_port)], home, java)  # fmt: skip
        self.master._wait_ready(lambda: self._up(self.master) and self._master_ready(), "the Spark Master's web UI")
        for i, worker in enumerate(self.workers):
            work = self.workdir / f"work-{i}"
            work.mkdir(exist_ok=True)
            ports = ["--port", str(free_port()), "--webui-port", str(free_port())]
            args = ["--host", "127.0.0.1", *ports, "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(work), self.master_url]  # fmt: skip
            worker.launch(WORKER_CLASS, args, home, java)
        self.master._wait_ready(
            lambda: all(self._up(w) for w in self.workers) and self.alive_workers() == len(self.workers),
            f"{len(self.workers)} Spark Workers registered ALIVE at {self.master_url}",
            interval=0.2,
        )
        return self

    def _master_ready(self) -> bool:
        try:
            return self.state().get("status") == "ALIVE"
        except (OSError, urllib.error.URLError, ValueError):
            return False

    @staticmethod
    def _up(daemon: _SparkDaemon) -> bool:
        problem = daemon.exited()
        if problem is not None:
            raise ServiceError(problem)
        return True

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()  # its process group: the Worker and the executors it launched
        self.master.stop()

    def close(self) -> None:
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
