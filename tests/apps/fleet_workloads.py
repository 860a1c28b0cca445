"""Spark applications for the live fleet checks (issue 25) on a standalone cluster, run as their own driver process.

    python -m tests.apps.fleet_workloads SPEC_JSON OUT_JSON

The spec's ``conf`` (and ``enable``, the listener's settings) apply to every application; ``apps`` lists the
applications to run one after the other in this process (a new SparkContext each, in the same driver JVM), each with
its own extra ``conf`` and ``work``:

- ``{"kind": "idle", "task_ms": T, "wait_s": W}``: a job of 2 tasks sleeping T ms (one per executor), then the driver
  waits W s (the workload: a driver busy elsewhere while it holds its executors), then the same job again;
- ``{"kind": "light", "task_ms": T}``: one job of 2 tasks sleeping T ms (heartbeats carry the executors' peaks);
- ``{"kind": "fill", "rows": N, "bytes": B}``: one task that builds N strings of B bytes one after the other (each
  garbage once measured): the executor's heap fills up to its limit, with a full collection before each string.

With ``"executors": 2`` an application waits until 2 executors are registered before its work (static allocation);
without, the work requests them (dynamic allocation). Writes per application its id and how long its work took.
Plain Python 3.9+.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def executors(sc: Any) -> int:
    """The executors registered now (the status tracker lists the driver too)."""
    return len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1


def sleep_job(spark: Any, name: str, task_ms: int) -> int:
    spark.sparkContext.setJobGroup(name, f"2 tasks sleeping {task_ms} ms")
    sleep = f"reflect('java.lang.Thread', 'sleep', CAST({int(task_ms)} AS BIGINT)) AS s"
    return len(spark.range(0, 2, 1, 2).selectExpr(sleep).collect())


def work(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "idle":
        first = sleep_job(spark, "first", spec["task_ms"])
        time.sleep(spec["wait_s"])  # the workload: the driver holds its executors while it does something else
        second = sleep_job(spark, "second", spec["task_ms"])
        return {"rows": first + second}
    if kind == "light":
        return {"rows": sleep_job(spark, "light", spec["task_ms"])}
    if kind == "fill":
        spark.sparkContext.setJobGroup("fill", f"{spec['rows']} strings of {spec['bytes']} bytes")
        query = f"octet_length(repeat(CAST(id % 10 AS STRING), {int(spec['bytes'])})) AS n"  # per row: not folded
        sizes = spark.range(0, spec["rows"], 1, 1).selectExpr(query).collect()
        return {"rows": len(sizes)}
    raise ValueError(f"unknown work kind={kind!r}")


def run(base: dict[str, str], enable: dict[str, Any] | None, app: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from sparktap.local.ports import wait_until

    builder = SparkSession.builder
    for key, value in {**base, **app.get("conf", {})}.items():
        builder = builder.config(key, value)
    if enable is not None:
        import sparktap.listener

        builder = sparktap.listener.enable(builder, **enable)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    try:
        if app.get("executors"):
            wait_until(lambda: executors(sc) == app["executors"], 180, f"{app['executors']} executors registered")
        started = time.time()
        done = work(spark, app["work"])
        return {"app_id": sc.applicationId, "seconds": time.time() - started, **done}
    finally:
        spark.stop()


def main() -> None:
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    out = [run(spec["conf"], spec.get("enable"), app) for app in spec["apps"]]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"apps": out}, f)


if __name__ == "__main__":
    main()
