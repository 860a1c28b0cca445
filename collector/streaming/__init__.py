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

__all__ = ["data_source_workers", "register"]

_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Register both data sources with a session (idempotent).

    Python data sources run in Python processes Spark starts for them (``create_data_source``, the streaming
    source's planner, the read and write workers); :func:`data_source_workers` sets up how they start.
    """
    from sparktap.collector.streaming.sink import ClickHouseSink
    from sparktap.collector.streaming.source import KafkaSource

    if spark in _REGISTERED:
        return
    with data_source_workers(spark):
        spark.dataSource.register(KafkaSource)
        spark.dataSource.register(ClickHouseSink)
    _REGISTERED.add(spark)


@contextlib.contextmanager
def data_source_workers(spark: SparkSession) -> Iterator[None]:
    """Data sources registered inside get the interpreter their Python processes start with: the one the
    SparkContext was given (``PYSPARK_PYTHON``, else ``python3`` from PATH); when ``PYSPARK_PYTHON`` is unset, this
    interpreter instead, so the processes can import sparktap and its dependencies. It travels in the data source's
    Python function (its ``pythonExec``), which Spark uses for those processes only: the session's other Python
    UDFs are not affected."""
    context = spark.sparkContext
    previous = context.pythonExec
    if not os.environ.get("PYSPARK_PYTHON") and sys.executable:
        context.pythonExec = sys.executable
    try:
        yield
    finally:
        context.pythonExec = previous
