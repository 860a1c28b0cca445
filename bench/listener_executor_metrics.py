"""Benchmark: the listener's executor telemetry (issue 25) — CPU per task end and per executor heartbeat, bytes per
application, and the whole listener's CPU share of a 10,000-task job on 2 executors.

    python -m bench.listener_executor_metrics [--tasks 10000]

1. ``SyntheticLoad executors`` (bench/java/): one stage of ``--tasks`` tasks on 2 executors with real
   ``taskExecutorMetrics`` and one heartbeat per executor per 100 tasks, driven into the listener's core (replay
   mode: no relay) with ``spark.sparktap.executorMetrics.enabled`` on and off, alternating, best of 5 each: the bus
   thread's ns per task end (on, off: the difference is what executor telemetry adds), ns per heartbeat, and the
   JSON bytes of executor_added / executor_removed / executor_metrics per application.
2. A real application on a Spark standalone cluster (tests/support/services/spark_standalone.py, 2 Workers of 1 core,
   ``spark.executor.heartbeatInterval`` 1 s), the listener on, producing to an embedded broker: a job of
   ``--tasks`` tasks; the listener's CPU = its own threads (``sparktap-*``) + the relay process + the bus thread's
   callbacks (task ends x ns per task end + heartbeats x ns per heartbeat, from 1.), against the CPU of the driver,
   both executors and the relay. Target: under 2 %.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._listener_common import count_messages, kafka, new_topic
from bench.listener_throughput import harness


def _executor_pids(app_id: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in argv and app_id.encode() in argv:
                pids.append(int(entry.name))
    return pids


APP = r"""
import json, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
import sparktap.listener
from bench.listener_executor_metrics import _executor_pids
from bench.listener_overhead import _process_cpu_ms as _cpu_ms, _relay_pids
conf, tasks, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
b = SparkSession.builder
for k, v in conf["spark"].items():
    b = b.config(k, v)
spark = sparktap.listener.enable(b, **conf["listener"]).getOrCreate()
sc = spark.sparkContext
app = sc.applicationId
from sparktap.local.ports import wait_until
wait_until(lambda: len(_executor_pids(app)) == 2, 120, "2 executors")
execs = _executor_pids(app)
spark.range(0, 1000, 1, 10).selectExpr("sum(id)").collect()  # warm-up
def cpu():
    mx = sc._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    threads = sum(max(0, mx.getThreadCpuTime(t.getId())) / 1e6
                  for t in sc._jvm.java.lang.Thread.getAllStackTraces().keySet()
                  if str(t.getName()).startswith("sparktap-"))
    relay = sum(_cpu_ms(p) for p in _relay_pids(app))
    return {"driver": _cpu_ms(sc._gateway.proc.pid), "executors": sum(_cpu_ms(p) for p in execs),
            "relay": relay, "threads": threads}
before = cpu(); t0 = time.monotonic()
spark.range(0, 2 * tasks, 1, tasks).selectExpr("sum(id)").collect()
wall = time.monotonic() - t0
after = cpu()
Path(out).write_text(json.dumps({"app_id": app, "wall": wall, **{k: after[k] - before[k] for k in after}}))
spark.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    micro = harness("executors", str(args.tasks))
    on, off = float(micro["task_end_ns_on"]), float(micro["task_end_ns_off"])
    beat = float(micro["heartbeat_ns"])
    print(f"bus thread per task end: {on:,.0f} ns with executor telemetry, {off:,.0f} ns without "
          f"(+{on - off:,.0f} ns); per executor heartbeat: {beat:,.0f} ns")  # fmt: skip
    print(f"executor families per application ({args.tasks:,} tasks, 2 executors, 1 stage): "
          f"{micro['executor_family_events']} events, {int(micro['executor_family_bytes']):,} bytes")  # fmt: skip

    import json

    from tests.support.services.spark_standalone import SparkStandaloneCluster

    with (
        kafka() as bootstrap,
        tempfile.TemporaryDirectory(prefix="sparktap-bench-") as scratch,
        SparkStandaloneCluster(2) as cluster,
    ):
        topic = new_topic(bootstrap, "bench-exec")
        conf = {
            "spark": {"spark.master": cluster.master_url, "spark.cores.max": "2", "spark.executor.memory": "512m",
                      "spark.executor.heartbeatInterval": "1s", "spark.ui.enabled": "false",
                      "spark.ui.showConsoleProgress": "false",
                      "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
            "listener": {"bootstrap_servers": bootstrap, "topic": topic, "spool_dir": scratch, "cluster": "bench"},
        }  # fmt: skip
        out = Path(scratch) / "out.json"
        subprocess.run([sys.executable, "-c", APP, json.dumps(conf), str(args.tasks), str(out)], check=True,
                       timeout=1800, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
        r = json.loads(out.read_text())
        events, size = count_messages(bootstrap, topic, 10**9, timeout=15)
    heartbeats = 2 * r["wall"] + r["wall"]  # 2 executors + the driver, one per second each
    bus = (args.tasks * on + heartbeats * beat) / 1e6
    listener = r["threads"] + r["relay"] + bus
    total = r["driver"] + r["executors"] + r["relay"]
    print(f"job of {args.tasks:,} tasks on 2 executors: {r['wall']:.1f} s wall, CPU driver {r['driver']:,.0f} ms + "
          f"executors {r['executors']:,.0f} ms + relay {r['relay']:,.0f} ms = {total:,.0f} ms")  # fmt: skip
    print(
        f"listener CPU: sparktap-* threads {r['threads']:,.0f} ms + relay {r['relay']:,.0f} ms + bus callbacks "
        f"~{bus:,.0f} ms = {listener:,.0f} ms = {100 * listener / total:.2f} % of the job's CPU (target < 2 %)"
    )
    print(f"the whole application in Kafka: {events:,} events, {size:,} bytes")


if __name__ == "__main__":
    main()
