"""``sparktap import`` beside Spark's History Server on the same event logs: MB of log and events per second per
core of CPU, single process, and the History Server's own replay time (its first REST request for an application's
stages, which makes it replay the whole log).

    python -m bench.import_throughput [--tasks 20000] [--logs DIR]
    python -m bench.import_throughput --big-mb 1000   # one ~1 GB log (a real log's jobs replicated, fresh ids)
    python -m bench.import_throughput --small 2000    # 2,000 small real logs: batched import vs a delivery per log

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
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._proc import cpu_seconds
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


SMALL_APP = """
import sys
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[2]").appName("import-bench-small").config("spark.ui.enabled", "false")
     .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", sys.argv[1])
     .config("spark.eventLog.rolling.enabled", "false").config("spark.eventLog.compress", "false")
     .config("spark.sql.shuffle.partitions", "4").getOrCreate())
sc = s.sparkContext
sc.parallelize(range(1000), 8).map(lambda x: (x % 10, 1)).reduceByKey(lambda a, b: a + b, 4).count()
s.range(0, 10000).selectExpr("id % 13 AS k").groupBy("k").count().collect()
s.stop()
"""
"""A small application (an RDD job of 8 + 4 tasks, a SQL aggregation): the shape of most logs of a busy History
Server directory."""


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_logs(directory: Path, tasks: int, codecs: tuple[str, ...] = ("none", "zstd")) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    for codec in codecs:
        script = directory.parent / "app.py"
        script.write_text(APP)
        subprocess.run([sys.executable, str(script), directory.as_uri(), str(tasks), codec], env=env, check=True,
                       capture_output=True)  # fmt: skip


def replay_only(logs: list[Path], scratch: Path, options: str | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s, events) of the replay JVM with its output read and counted; its options as ``sparktap
    import`` chooses them for these logs (``jvm.jvm_options``), or ``options``."""
    jvm = replay_jvm.find()
    before, start = cpu_children(), time.monotonic()
    saved = os.environ.get("SPARKTAP_IMPORT_JVM_OPTIONS")
    if options is not None:
        os.environ["SPARKTAP_IMPORT_JVM_OPTIONS"] = options
    try:
        proc, err = replay_jvm.start(jvm, None, scratch, sum(p.stat().st_size for p in logs))
    finally:
        if saved is None:
            os.environ.pop("SPARKTAP_IMPORT_JVM_OPTIONS", None)
        else:
            os.environ["SPARKTAP_IMPORT_JVM_OPTIONS"] = saved
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(replay_jvm.path_request(i, str(p)) for i, p in enumerate(logs, 1)))
    proc.stdin.close()
    events = sum(1 for line in proc.stdout if line[0] != 35)
    proc.wait()
    err.close()
    return time.monotonic() - start, cpu_children() - before, events


def jvm_startup(scratch: Path) -> tuple[float, float]:
    """The replay JVM with no log: its start-up, subtracted from the figures above."""
    return replay_only([], scratch)[:2]


def full_import(logs: list[Path], scratch: Path, *extra: str, name: str = "chdb") -> tuple[float, float, str]:
    """(wall s, CPU s, summary) of ``sparktap import`` of these logs into a chDB of its own."""
    before, start = cpu_children(), time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sparktap", "import", *map(str, logs), "--storage-url", f"chdb://{scratch}/{name}",
         "--checkpoint", str(scratch / f"ck-{name}.json"), *extra],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return time.monotonic() - start, cpu_children() - before, proc.stdout


def summary_events(summary: str) -> int:
    found = re.search(r"applications, (\d+) events", summary)
    return int(found.group(1)) if found else 0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


_IDS = re.compile(rb'"(Job ID|Stage ID|Task ID|RDD ID)":(\d+)|"(Stage IDs|Parent IDs)":\[([0-9,]*)\]')


def big_log(base: Path, target: Path, mb: float) -> tuple[int, int]:
    """A log of about ``mb`` MB from a real plain log: its RDD jobs (from the first job start to the last job end
    before the first SQL execution) repeated with fresh job, stage, RDD and task ids, each copy after the last,
    so the History Server and sparktap replay them as more jobs of the same application. (copies, bytes)"""
    lines = base.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"SparkListenerJobStart"' in line)
    sql = next((i for i, line in enumerate(lines) if b"SparkListenerSQLExecutionStart" in line), len(lines))
    last = max(i for i, line in enumerate(lines[:sql]) if b'"SparkListenerJobEnd"' in line)
    block = lines[first : last + 1]
    top = {b"Job ID": 0, b"Stage ID": 0, b"Task ID": 0}
    for line in lines:
        for match in _IDS.finditer(line):
            if match.group(1):
                key = b"Stage ID" if match.group(1) == b"RDD ID" else match.group(1)
                top[key] = max(top[key], int(match.group(2)))
            elif match.group(4):
                top[b"Stage ID"] = max([top[b"Stage ID"], *(int(x) for x in match.group(4).split(b",") if x)])
    step = {b"Job ID": top[b"Job ID"] + 1, b"Stage ID": top[b"Stage ID"] + 1, b"Task ID": top[b"Task ID"] + 1}
    step[b"RDD ID"] = step[b"Stage ID"]  # stage and RDD ids share one offset: "Parent IDs" names either
    block_bytes = sum(len(line) for line in block)
    copies = max(0, round((mb * 1e6 - len(b"".join(lines))) / block_bytes))
    with target.open("wb") as out:
        out.writelines(lines[: last + 1])
        for k in range(1, copies + 1):

            def shift(match: re.Match[bytes], k: int = k) -> bytes:
                if match.group(1):
                    return b'"%s":%d' % (match.group(1), int(match.group(2)) + k * step[match.group(1)])
                ids = b",".join(b"%d" % (int(x) + k * step[b"Stage ID"]) for x in match.group(4).split(b",") if x)
                return b'"%s":[%s]' % (match.group(3), ids)

            out.writelines(_IDS.sub(shift, line) for line in block)
        out.writelines(lines[last + 1 :])
    return copies, target.stat().st_size


def import_startup(scratch: Path) -> tuple[float, float]:
    """``sparktap import`` of an empty directory into a fresh chDB: its fixed start-up (Python's imports, chDB, the
    schema's DDL), no replay JVM."""
    empty = scratch / "empty"
    empty.mkdir(exist_ok=True)
    return full_import([empty], scratch, name="startup")[:2]


def side_by_side(
    logs: list[Path], log_dir: Path, scratch: Path, title: str, jvm_defaults: bool = False, rounds: int = 1
) -> None:
    """The replay JVM alone, the whole import into chDB and the History Server, on the same logs, ``rounds`` times;
    with ``jvm_defaults`` the replay JVM alone again with C1 + serial GC (the small logs' options) and with the
    JVM's own defaults (C2, G1), beside the options the import chose (``jvm.jvm_options``)."""
    mb = sum(p.stat().st_size for p in logs) / 1e6
    size = sum(p.stat().st_size for p in logs)
    jvm_wall, jvm_cpu = jvm_startup(scratch)
    print(f"{title}: {len(logs)} logs, {mb:.1f} MB; replay JVM options {replay_jvm.jvm_options(size)}; {load()}")
    for k in range(1, rounds + 1):
        wall, cpu, events = replay_only(logs, scratch)
        rw, rc = max(wall - jvm_wall, 1e-3), max(cpu - jvm_cpu, 1e-3)
        print(f"[{k}] sparktap replay: {rw:.1f} s wall, {rc:.1f} s CPU: {mb / rc:.1f} MB/s per core, "
              f"{events / rc:,.0f} events/s per core ({events} events); {load()}")  # fmt: skip
        if jvm_defaults:
            for label, options in (("C1 + serial GC", " ".join(replay_jvm.JVM_OPTIONS)), ("the JVM's defaults", "")):
                dw, dc, _ = replay_only(logs, scratch, options)
                dw, dc = max(dw - jvm_wall, 1e-3), max(dc - jvm_cpu, 1e-3)
                print(f"[{k}] sparktap replay, {label}: {dw:.1f} s wall, {dc:.1f} s CPU: {mb / dc:.1f} MB/s per "
                      f"core; {load()}")  # fmt: skip
        sw, sc = import_startup(scratch)
        iw, ic, _ = full_import(logs, scratch, name=f"chdb{k}")
        iw, ic = max(iw - jvm_wall, 1e-3), max(ic - jvm_cpu, 1e-3)
        pc = max(ic - sc, 1e-3)
        print(f"[{k}] sparktap import to chDB: {iw:.1f} s wall, {ic:.1f} s CPU: {mb / ic:.1f} MB/s per core, "
              f"{events / ic:,.0f} events/s per core; its fixed start-up alone (no log: imports, chDB, schema) "
              f"{sc:.1f} s CPU, without it {pc:.1f} s: {mb / pc:.1f} MB/s per core; {load()}")  # fmt: skip
        hs = history_server(log_dir, [p.name.split(".")[0] for p in logs], scratch)
        hw, hc = sum(h[1] for h in hs), max(sum(h[2] for h in hs), 1e-3)
        print(f"[{k}] History Server replay (first /stages per application): {hw:.1f} s wall, {hc:.1f} s CPU: "
              f"{mb / hc:.1f} MB/s per core; {load()}")  # fmt: skip
        print(f"[{k}] ratio per core (MB per CPU s), sparktap replay / History Server: {hc / rc:.2f} x; whole "
              f"import / History Server: {hc / ic:.2f} x ({hc / pc:.2f} x without the import's start-up)")  # fmt: skip


def small_logs(scratch: Path, count: int, hs_logs: int, per_log_logs: int) -> None:
    """``count`` copies of a small real application's log (each its own app id): ``sparktap import`` batched (the
    default) on all, then batched and with a delivery per log (``--batch-mb 0``, as before the batching) on the
    first ``per_log_logs``, each into its own chDB; the History Server on the first ``hs_logs`` of them (their own
    directory: listing 2,000 logs is not its replay)."""
    src = scratch / "small-src"
    src.mkdir()
    script = scratch / "small_app.py"
    script.write_text(SMALL_APP)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    subprocess.run([sys.executable, str(script), src.as_uri()], env=env, check=True, capture_output=True)
    many = many_logs(sorted(src.iterdir()), scratch, count, "small")
    logs = sorted(many.iterdir())
    mb = sum(p.stat().st_size for p in logs) / 1e6
    print(f"small logs: {len(logs)} copies of a {mb / len(logs) * 1000:.0f} KB log, {mb:.1f} MB; {load()}")
    jvm_wall, jvm_cpu = jvm_startup(scratch)

    def subset(n: int) -> tuple[Path, float]:
        """the first ``n`` logs, in a directory of their own (hard links)"""
        directory = scratch / f"first-{n}"
        if not directory.exists():
            directory.mkdir()
            for log in logs[:n]:
                os.link(log, directory / log.name)
        return directory, sum(p.stat().st_size for p in directory.iterdir()) / 1e6

    mb_per_cpu: dict[tuple[str, int], float] = {}
    runs: list[tuple[str, int, tuple[str, ...]]] = [("batched", len(logs), ())]
    if per_log_logs < len(logs):
        runs.append(("batched", per_log_logs, ()))
    runs.append(("per log", per_log_logs, ("--batch-mb", "0")))
    for name, n, extra in runs:
        directory, size = subset(n)
        wall, cpu, summary = full_import([directory], scratch, *extra, name=f"{name.replace(' ', '-')}-{n}")
        wall, cpu = max(wall - jvm_wall, 1e-3), max(cpu - jvm_cpu, 1e-3)
        events = summary_events(summary)
        delivered = next((line for line in summary.splitlines() if line.startswith("delivered")), "")
        mb_per_cpu[(name, n)] = size / cpu
        print(f"sparktap import to chDB, {name}, {n} logs ({size:.1f} MB): {wall:.1f} s wall, {cpu:.1f} s CPU: "
              f"{size / cpu:.1f} MB/s per core, {events / cpu:,.0f} events/s per core, {n / cpu:.1f} logs per CPU s "
              f"({events} events, {delivered}); {load()}")  # fmt: skip
    directory, sub_mb = subset(hs_logs)
    hs = history_server(directory, [p.name for p in sorted(directory.iterdir())], scratch)
    hw, hc = sum(h[1] for h in hs), max(sum(h[2] for h in hs), 1e-3)
    print(f"History Server replay of {len(hs)} of these logs ({sub_mb:.1f} MB): {hw:.1f} s wall, {hc:.1f} s CPU: "
          f"{sub_mb / hc:.1f} MB/s per core, {len(hs) / hc:.1f} logs per CPU s; {load()}")  # fmt: skip
    batched = mb_per_cpu[("batched", per_log_logs)]
    print(f"per core (MB per CPU s), {per_log_logs} logs: batched / per log "
          f"{batched / mb_per_cpu[('per log', per_log_logs)]:.2f} x; batched ({len(logs)} logs) / History Server "
          f"{mb_per_cpu[('batched', len(logs))] / (sub_mb / hc):.2f} x")  # fmt: skip


@dataclass
class SparkRun:
    executors: int
    wall: float
    """the whole command: the driver's start-up included"""
    seconds: float
    """the import itself, as its summary says (listing, tasks, checkpoint)"""
    cpu_driver: float
    cpu_executors: list[float]
    """per Worker: its executor JVM, Python workers and replay JVMs"""
    mb: float
    tasks: int


def many_logs(logs: list[Path], scratch: Path, copies: int, name: str = "many") -> Path:
    """``copies`` copies of each plain log, each under its own application id."""
    many = scratch / name
    many.mkdir()
    for log in logs:
        if log.suffix or log.is_dir():  # a compressed log: copied as it is under new names would clash; plain only
            continue
        app = log.name
        data = log.read_bytes()
        for i in range(copies):
            (many / f"{app}-c{i:04d}").write_bytes(data.replace(app.encode(), f"{app}-c{i:04d}".encode()))
    return many


def engine_spark(many: Path, scratch: Path, executors: int, cluster: Any, server: Any) -> SparkRun:
    """``sparktap import --engine spark`` on the standalone cluster with ``executors`` executors of 1 core (each
    Worker has 1 core: ``spark.cores.max`` = executors), into the clickhouse-server. CPU of the import's process
    tree and of each Worker's tree (its executor, Python workers and replay JVMs), sampled from /proc every 0.2 s
    (a process's last < 0.2 s may be missed), minus what the Workers had used before."""
    mb = sum(p.stat().st_size for p in many.iterdir()) / 1e6
    workers = [w.pid for w in cluster.workers]
    before = {pid: cpu_of_tree(pid) for pid in workers}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparktap", "import", str(many), "--engine", "spark", "--master", cluster.master_url,
         "--conf", f"spark.cores.max={executors}", "--conf", "spark.executor.cores=1",
         "--conf", "spark.executor.memory=512m", "--storage-url", server.url(f"bench_spark_{executors}"),
         "--checkpoint", str(scratch / f"ck-{executors}.json")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    seen: dict[int, dict[int, float]] = {root: {} for root in [proc.pid, *workers]}
    while proc.poll() is None:
        for root, cpus in seen.items():
            for pid in tree(root):
                try:
                    cpus[pid] = max(cpus.get(pid, 0.0), cpu_seconds(pid))
                except (OSError, IndexError, ValueError):
                    pass  # ended between the listing and the read
        time.sleep(0.2)
    wall = time.monotonic() - start
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"sparktap import --engine spark failed (exit {proc.returncode}): {out[-2000:]}")
    summary = re.search(r"in ([0-9.]+) s \(", out)
    executor_cpu = [sum(seen[pid].values()) - before[pid] for pid in workers]
    ck = json.loads((scratch / f"ck-{executors}.json").read_text())
    return SparkRun(executors, wall, float(summary.group(1)) if summary else wall, sum(seen[proc.pid].values()),
                    executor_cpu, mb, len(ck["logs"]))  # fmt: skip


def cpu_of_tree(root: int) -> float:
    total = 0.0
    for pid in tree(root):
        try:
            total += cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            pass
    return total


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
    served: list[Any] = []
    try:
        wait_until(listed, 300, "the History Server lists the applications", interval=0.5)
        for app in apps:
            cpu, start = cpu_seconds(proc.pid), time.monotonic()
            stages = get(f"applications/{app}/stages")
            out.append((app, time.monotonic() - start, cpu_seconds(proc.pid) - cpu))
            served.append(stages)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    tasks = sum(stage.get("numCompleteTasks", 0) for stages in served for stage in stages)
    print(f"History Server served {sum(len(s) for s in served)} stages of {tasks} completed tasks")
    return out


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` on core ``cpu``: the executors a Worker launches (and their Python workers and replay
    JVMs) inherit it."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {cpu})
        except OSError:
            pass  # the thread ended


def spark_side_by_side(logs: list[Path], scratch: Path, copies: int, pinned: bool = False) -> None:
    """--engine spark with 1 and 2 executors on one standalone cluster (2 Workers of 1 core), same logs; with
    ``pinned`` Worker i (and all it starts) runs on core i only."""
    from tests.support.services.clickhouse import ClickHouseServerProcess
    from tests.support.services.spark_standalone import SparkStandaloneCluster

    many = many_logs(logs, scratch, copies)
    (scratch / "ch").mkdir()
    (scratch / "standalone").mkdir()
    print(f"load average before the --engine spark runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with SparkStandaloneCluster(2, cores=1, memory="1g", workdir=scratch / "standalone") as cluster, \
            ClickHouseServerProcess(scratch / "ch") as server:  # fmt: skip
        if pinned:
            for i, worker in enumerate(cluster.workers):
                pin(worker.pid, i % (os.cpu_count() or 1))
        runs = [engine_spark(many, scratch, n, cluster, server) for n in (1, 2)]
    for r in runs:
        cpu = r.cpu_driver + sum(r.cpu_executors)
        split = " + ".join(f"{c:.1f}" for c in r.cpu_executors)
        print(f"--engine spark, {r.executors} executor(s): {r.mb:.1f} MB, {r.tasks} logs; import {r.seconds:.1f} s "
              f"({r.wall:.1f} s with the driver's start-up); CPU {cpu:.1f} s (driver {r.cpu_driver:.1f}, Workers "
              f"{split}): {r.mb / cpu:.1f} MB per CPU s, {r.mb / r.seconds:.1f} MB per import s; executor CPU per "
              f"log {sum(r.cpu_executors) / r.tasks * 1000:.0f} ms, per MB {sum(r.cpu_executors) / r.mb * 1000:.0f} "
              f"ms; {load()}")  # fmt: skip
    print(f"speed-up of the import with 2 executors instead of 1: {runs[0].seconds / runs[1].seconds:.2f} x "
          f"(load average now {os.getloadavg()[0]:.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20000, help="tasks per job (4 jobs per application)")
    parser.add_argument("--logs", type=Path, help="a directory of logs to use instead of writing new ones")
    parser.add_argument(
        "--engine-spark", type=int, default=0, metavar="COPIES",
        help="also run --engine spark with 1 and 2 executors on a standalone cluster, on COPIES copies of each "
        "plain log (0: not run)",
    )  # fmt: skip
    parser.add_argument("--big-mb", type=float, default=0, help="also one log of about this many MB (0: not run)")
    parser.add_argument("--small", type=int, default=0, help="also this many small logs (0: not run)")
    parser.add_argument("--hs-logs", type=int, default=200, help="with --small: the History Server on this many")
    parser.add_argument(
        "--per-log-logs", type=int, default=0, help="with --small: the delivery per log on this many (0: all)"
    )
    parser.add_argument(
        "--jvm-defaults", action="store_true",
        help="with --big-mb: the replay also with C1 + serial GC and with the JVM's default options",
    )  # fmt: skip
    parser.add_argument("--big-log", type=Path, help="with --big-mb: this log (made before by --big-mb) instead")
    parser.add_argument("--rounds", type=int, default=1, help="with --big-mb: the comparison this many times")
    parser.add_argument("--pin", action="store_true", help="with --engine-spark: Worker i on core i only")
    parser.add_argument(
        "--only", action="store_true", help="only --big-mb, --small and --engine-spark (not the logs' own trio)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparktap-bench-import-") as tmp:
        scratch = Path(tmp)
        log_dir = args.logs or scratch / "logs"
        if args.small:
            small_logs(scratch, args.small, args.hs_logs, min(args.per_log_logs or args.small, args.small))
        if args.logs is None and ((args.big_mb and not args.big_log) or args.engine_spark or not args.only):
            log_dir.mkdir()
            write_logs(log_dir, args.tasks, ("none",) if args.only and not args.engine_spark else ("none", "zstd"))
        if args.big_log:
            print(f"big log: {args.big_log} ({args.big_log.stat().st_size / 1e6:.1f} MB)")
            side_by_side([args.big_log], args.big_log.parent, scratch, "one big log", args.jvm_defaults, args.rounds)
        elif args.big_mb:
            base = next(p for p in sorted(log_dir.iterdir()) if not p.suffix and p.is_file())
            big_dir = scratch / "big"
            big_dir.mkdir()
            copies, size = big_log(base, big_dir / base.name, args.big_mb)  # its app id: the History Server's
            print(f"big log: {base.name} ({base.stat().st_size / 1e6:.1f} MB, a real application) with its jobs "
                  f"repeated {copies} times under fresh ids: {size / 1e6:.1f} MB")  # fmt: skip
            side_by_side([big_dir / base.name], big_dir, scratch, "one big log", args.jvm_defaults, args.rounds)
        logs = sorted(p for p in log_dir.iterdir() if not p.name.startswith(".")) if log_dir.exists() else []
        if args.only:
            if args.engine_spark:
                spark_side_by_side(logs, scratch, args.engine_spark, args.pin)
            return
        mb = sum(p.stat().st_size for p in logs) / 1e6
        jvm_wall, jvm_cpu = jvm_startup(scratch)
        wall, cpu, events = replay_only(logs, scratch)
        print(f"logs: {len(logs)} ({mb:.1f} MB on disk), {events} contract events")
        print(f"replay JVM start-up: {jvm_wall:.1f} s wall, {jvm_cpu:.1f} s CPU (subtracted below)")
        rw, rc = max(wall - jvm_wall, 1e-3), max(cpu - jvm_cpu, 1e-3)
        print(f"sparktap replay: {rw:.2f} s wall, {rc:.2f} s CPU: {mb / rc:.1f} MB/s per core, "
              f"{events / rc:,.0f} events/s per core")  # fmt: skip
        iw, ic, _ = full_import(logs, scratch)
        iw, ic = max(iw - jvm_wall, 1e-3), max(ic - jvm_cpu, 1e-3)
        print(f"sparktap import to chDB: {iw:.2f} s wall, {ic:.2f} s CPU: {mb / ic:.1f} MB/s per core")
        if args.engine_spark:
            spark_side_by_side(logs, scratch, args.engine_spark, args.pin)
        apps = [p.name.split(".")[0] for p in logs]
        hs = history_server(log_dir, apps, scratch)
        hw, hc = sum(h[1] for h in hs), max(sum(h[2] for h in hs), 1e-3)
        print(f"History Server replay (first /stages per application): {hw:.2f} s wall, {hc:.2f} s CPU: "
              f"{mb / hc:.1f} MB/s per core")  # fmt: skip
        print(f"ratio sparktap replay / History Server, MB per CPU second: {(mb / rc) / (mb / hc):.2f} x")


if __name__ == "__main__":
    main()
