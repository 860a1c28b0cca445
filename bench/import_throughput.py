"""``sparktap import`` beside Spark's History Server on the same event logs: MB of log and events per second per
core of CPU, single process, and the History Server's own replay time (its first REST request for an application's
stages, which makes it replay the whole log).

    python -m bench.import_throughput [--tasks 20000] [--logs DIR]

Writes the logs with a real Spark application (local[2], event logging on, plain and zstd) unless ``--logs`` names
a directory of logs. Then, on the same logs:

- **sparktap**: the replay JVM (``ReplayMain``, the listener's core on Spark's ``ReplayListenerBus``) with its
  contract events read and counted by Python, as ``sparktap import`` reads them; and the whole import into chDB
  (decode + insert as the collector does). CPU = the child processes' user + system time.
- **History Server**: ``org.apache.spark.deploy.history.HistoryServer`` from the pyspark installation, on
  127.0.0.1; per application, the wall and CPU time (``/proc``) of the first ``/api/v1/applications/<id>/stages``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from sparktap.history import jvm as replay_jvm
from sparktap.listener import javabuild
from sparktap.local.ports import free_port, wait_until

APP = """
import sys
from pyspark.sql import SparkSession
out, tasks, codec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
b = (SparkSession.builder.master("local[2]").appName("import-bench-" + codec)
     .config("spark.ui.enabled", "false").config("spark.eventLog.enabled", "true")
     .config("spark.eventLog.dir", out).config("spark.eventLog.rolling.enabled", "false")
     .config("spark.eventLog.compress", str(codec != "none").lower()))
if codec != "none":
    b = b.config("spark.eventLog.compression.codec", codec)
s = b.getOrCreate()
sc = s.sparkContext
for _ in range(4):
    sc.parallelize(range(tasks), tasks // 4).map(lambda x: (x % 100, 1)).reduceByKey(lambda a, b: a + b, 50).count()
s.range(0, 100000).selectExpr("id % 13 AS k").groupBy("k").count().collect()
s.stop()
"""


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def write_logs(directory: Path, tasks: int) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    for codec in ("none", "zstd"):
        script = directory.parent / "app.py"
        script.write_text(APP)
        subprocess.run([sys.executable, str(script), directory.as_uri(), str(tasks), codec], env=env, check=True,
                       capture_output=True)  # fmt: skip


def replay_only(logs: list[Path], scratch: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, events) of the replay JVM with its output read and counted."""
    jvm = replay_jvm.find()
    before, start = cpu_children(), time.monotonic()
    proc, err = replay_jvm.start(jvm, None, scratch)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(str(p).encode() + b"\n" for p in logs))
    proc.stdin.close()
    events = sum(1 for line in proc.stdout if line[0] != 35)
    proc.wait()
    err.close()
    return time.monotonic() - start, cpu_children() - before, events


def jvm_startup(scratch: Path) -> tuple[float, float]:
    """The replay JVM with no log: its start-up, subtracted from the figures above."""
    return replay_only([], scratch)[:2]


def full_import(logs: list[Path], scratch: Path) -> tuple[float, float]:
    before, start = cpu_children(), time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "sparktap", "import", *map(str, logs), "--storage-url", f"chdb://{scratch}/chdb",
         "--checkpoint", str(scratch / "ck.json")],
        check=True, capture_output=True,
    )  # fmt: skip
    return time.monotonic() - start, cpu_children() - before


def engine_spark(logs: list[Path], scratch: Path, executors: int, copies: int) -> tuple[float, float, float]:
    """``sparktap import --engine spark --master local[N]`` into a local clickhouse-server, on ``copies`` copies of
    each log (distinct application ids): (wall s, CPU s of the import and everything it started, sampled from /proc
    every 0.2 s: a process's last < 0.2 s may be missed; MB read)."""
    from sparktap.local.clickhouse import ClickHouseServerProcess

    many = scratch / f"many-{executors}"
    many.mkdir()
    for log in logs:
        app = log.name.split(".")[0]
        data = log.read_bytes()
        if log.suffix:  # a compressed log: copied as it is under new names would clash; plain logs only
            continue
        for i in range(copies):
            (many / f"{app}{i:04d}").write_bytes(data.replace(app.encode(), f"{app}{i:04d}".encode()))
    mb = sum(p.stat().st_size for p in many.iterdir()) / 1e6
    (scratch / f"ch-{executors}").mkdir()
    with ClickHouseServerProcess(scratch / f"ch-{executors}") as server:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparktap", "import", str(many), "--engine", "spark", "--master",
             f"local[{executors}]", "--storage-url", server.url(),
             "--checkpoint", str(scratch / f"ck-{executors}.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )  # fmt: skip
        seen: dict[int, float] = {}
        while proc.poll() is None:
            for pid in tree(proc.pid):
                try:
                    seen[pid] = max(seen.get(pid, 0.0), proc_cpu(pid))
                except (OSError, IndexError, ValueError):
                    pass  # ended between the listing and the read
            time.sleep(0.2)
        if proc.returncode != 0:
            raise SystemExit(f"sparktap import --engine spark failed (exit {proc.returncode})")
        return time.monotonic() - start, sum(seen.values()), mb


def tree(root: int) -> list[int]:
    """``root`` and its descendants (from /proc), the Spark JVM, Python workers and replay JVMs included."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def history_server(log_dir: Path, apps: list[str], scratch: Path) -> list[tuple[str, float, float]]:
    _version, jars = javabuild._pyspark_jars() or ("", Path())  # noqa: SLF001
    port = free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = (scratch / "hs.log").open("wb")
    proc = subprocess.Popen(
        ["java", "-cp", f"{jars}/*", f"-Dspark.history.fs.logDirectory={log_dir.as_uri()}",
         f"-Dspark.history.ui.port={port}", "-Dspark.history.fs.update.interval=1s",
         "org.apache.spark.deploy.history.HistoryServer"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def get(path: str) -> object:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=600) as resp:  # noqa: S310
            return json.loads(resp.read())

    def listed() -> bool:
        try:
            return set(apps) <= {a["id"] for a in get("applications")}  # type: ignore[attr-defined]
        except OSError:
            return False

    out = []
    try:
        wait_until(listed, 300, "the History Server lists the applications", interval=0.5)
        for app in apps:
            cpu, start = proc_cpu(proc.pid), time.monotonic()
            get(f"applications/{app}/stages")
            out.append((app, time.monotonic() - start, proc_cpu(proc.pid) - cpu))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20000, help="tasks per job (4 jobs per application)")
    parser.add_argument("--logs", type=Path, help="a directory of logs to use instead of writing new ones")
    parser.add_argument(
        "--engine-spark", type=int, default=0, metavar="COPIES",
        help="also run --engine spark with 1 and 2 executors on COPIES copies of each plain log (0: not run)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparktap-bench-import-") as tmp:
        scratch = Path(tmp)
        log_dir = args.logs or scratch / "logs"
        if args.logs is None:
            log_dir.mkdir()
            write_logs(log_dir, args.tasks)
        logs = sorted(p for p in log_dir.iterdir() if not p.name.startswith("."))
        mb = sum(p.stat().st_size for p in logs) / 1e6
        jvm_wall, jvm_cpu = jvm_startup(scratch)
        wall, cpu, events = replay_only(logs, scratch)
        print(f"logs: {len(logs)} ({mb:.1f} MB on disk), {events} contract events")
        print(f"replay JVM start-up: {jvm_wall:.1f} s wall, {jvm_cpu:.1f} s CPU (subtracted below)")
        rw, rc = max(wall - jvm_wall, 1e-3), max(cpu - jvm_cpu, 1e-3)
        print(f"sparktap replay: {rw:.2f} s wall, {rc:.2f} s CPU: {mb / rc:.1f} MB/s per core, "
              f"{events / rc:,.0f} events/s per core")  # fmt: skip
        iw, ic = full_import(logs, scratch)
        iw, ic = max(iw - jvm_wall, 1e-3), max(ic - jvm_cpu, 1e-3)
        print(f"sparktap import to chDB: {iw:.2f} s wall, {ic:.2f} s CPU: {mb / ic:.1f} MB/s per core")
        for executors in (1, 2) if args.engine_spark else ():
            ew, ec, emb = engine_spark(logs, scratch, executors, args.engine_spark)
            print(f"sparktap import --engine spark local[{executors}] -> clickhouse-server: {emb:.1f} MB, {ew:.2f} s "
                  f"wall, {ec:.2f} s CPU: {emb / ec:.1f} MB/s per core, {emb / ew:.1f} MB/s wall")  # fmt: skip
        apps = [p.name.split(".")[0] for p in logs]
        hs = history_server(log_dir, apps, scratch)
        hw, hc = sum(h[1] for h in hs), max(sum(h[2] for h in hs), 1e-3)
        print(f"History Server replay (first /stages per application): {hw:.2f} s wall, {hc:.2f} s CPU: "
              f"{mb / hc:.1f} MB/s per core")  # fmt: skip
        print(f"ratio sparktap replay / History Server, MB per CPU second: {(mb / rc) / (mb / hc):.2f} x")


if __name__ == "__main__":
    main()
