"""Structured Streaming path of the collector: the ``sparktap-kafka`` source and the ``sparktap-clickhouse`` sink.

>>> from sparktap.collector.streaming import register
>>> register(spark)  # then spark.readStream.format("sparktap-kafka") / writeStream.format("sparktap-clickhouse")

``run.start_query`` wires source -> sink with a checkpoint (what ``sparktap collect --engine spark`` runs).
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]

_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Register both data sources with a session (idempotent).

    Python data sources run in Spark's Python workers, started with the interpreter the SparkContext was given
    (``PYSPARK_PYTHON``, else ``python3`` from PATH). When ``PYSPARK_PYTHON`` is unset, sparktap's data sources
    are registered with this interpreter instead, so the workers can import sparktap and its dependencies.
    """
    from sparktap.collector.streaming.sink import ClickHouseSink
    from sparktap.collector.streaming.source import KafkaSource

    if spark in _REGISTERED:
        return
    with _worker_python(spark):
        spark.dataSource.register(KafkaSource)
        spark.dataSource.register(ClickHouseSink)
    _REGISTERED.add(spark)


@contextlib.contextmanager
def _worker_python(spark: SparkSession) -> Iterator[None]:
    context = spark.sparkContext
    previous = context.pythonExec
    if not os.environ.get("PYSPARK_PYTHON") and sys.executable:
        context.pythonExec = sys.executable
    try:
        yield
    finally:
        context.pythonExec = previous
