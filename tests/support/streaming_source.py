"""A ``sparktap-kafka`` streaming source over a test topic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparktap.collector.streaming import register

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def source(spark: SparkSession, bootstrap: str, **options: Any) -> Any:
    register(spark)
    reader = spark.readStream.format("sparktap-kafka").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("startingOffsets", "earliest").option("parse", "raw")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()
