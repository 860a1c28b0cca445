"""A Spark application for the native-engine tests, run as its own driver process under pyspark 3.5 with DataFusion
Comet on its class path (``tests/integration/test_native_fallback.py``).

    python -m tests.apps.native_workloads SPEC_JSON OUT_JSON

Writes ``rows`` rows (``id``, ``k = id % 100``) as Parquet under ``data``, registers the Python UDF ``plus1`` (a
Python UDF runs in ``BatchEvalPython``, which Comet cannot run natively), then runs each of the spec's ``queries``
(``{group: sql}``) under its own job group. Writes the application id, each group's job ids, result rows and
executed plan. Plain Python 3.9+.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    spec_path, out_path = sys.argv[1], sys.argv[2]
    spec: dict[str, Any] = json.loads(open(spec_path, encoding="utf-8").read())
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    if spec.get("enable") is not None:
        import sparktap.listener

        builder = sparktap.listener.enable(builder, **spec["enable"])
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    out: dict[str, Any] = {"app_id": sc.applicationId, "groups": {}}
    try:
        sc.setJobGroup("load", "write the table")
        spark.range(0, spec["rows"], 1, 2).selectExpr("id", "id % 100 AS k").write.mode("overwrite").parquet(
            spec["data"]
        )
        spark.read.parquet(spec["data"]).createOrReplaceTempView("t")
        spark.udf.register("plus1", lambda x: x + 1, "long")
        for group, sql in spec["queries"].items():
            sc.setJobGroup(group, group)
            df = spark.sql(sql)
            rows = sorted((int(r[0]), int(r[1])) for r in df.collect())
            plan = df._jdf.queryExecution().executedPlan().toString()
            out["groups"][group] = {"rows": rows, "plan": plan}
        tracker = sc.statusTracker()
        for group in out["groups"]:
            out["groups"][group]["job_ids"] = sorted(tracker.getJobIdsForGroup(group))
    finally:
        spark.stop()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
