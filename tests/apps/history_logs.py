"""Spark applications that write event logs, for the ``sparktap import`` tests; runs under any pyspark (3.5, 4.x).

    python -m tests.apps.history_logs SPEC_JSON OUT_JSON

SPEC_JSON: ``{"base": {conf}, "runs": [{"name": ..., "conf": {...}, "workload": "small" | "aqe"}]}``. Each run is
its own SparkContext (event logging is set per context); OUT_JSON maps each run's name to its application id.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SKEW_CONF = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": "1k",
    "spark.sql.adaptive.skewJoin.skewedPartitionFactor": "2",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "1k",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
}
COALESCE_CONF = {
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64MB",
    "spark.sql.shuffle.partitions": "50",
}


def small(spark: Any) -> None:
    """A SQL aggregation (two stages, a shuffle) and an RDD job."""
    spark.range(0, 5000, numPartitions=2).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    spark.sparkContext.parallelize(range(100), 3).map(lambda x: x * 2).sum()


def aqe(spark: Any) -> None:
    """A skewed sort-merge join AQE splits, then an aggregation whose 50 shuffle partitions AQE coalesces."""
    for key, value in SKEW_CONF.items():
        spark.conf.set(key, value)
    left = spark.range(0, 4000, numPartitions=2).selectExpr("IF(id < 3000, 0, id % 40) AS k", "id AS v")
    right = spark.range(0, 40, numPartitions=2).selectExpr("id AS k", "id * 2 AS w")
    left.join(right, "k").selectExpr("sum(v + w)").collect()
    for key, value in COALESCE_CONF.items():
        spark.conf.set(key, value)
    spark.range(0, 2000, numPartitions=2).selectExpr("id % 10 AS k").groupBy("k").count().collect()


WORKLOADS = {"small": small, "aqe": aqe}


def run(spec: dict[str, Any]) -> dict[str, str]:
    from pyspark.sql import SparkSession

    apps = {}
    for item in spec["runs"]:
        builder = SparkSession.builder
        for key, value in {**spec.get("base", {}), **item["conf"]}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            WORKLOADS[item["workload"]](spark)
            apps[item["name"]] = spark.sparkContext.applicationId
        finally:
            spark.stop()
    return apps


def main() -> None:
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(run(spec), f)


if __name__ == "__main__":
    main()
