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
    """Data sources registered inside get sparktap's set-up of their Python processes.

    - The interpreter: the one the SparkContext was given (``PYSPARK_PYTHON``, else ``python3`` from PATH); when
      ``PYSPARK_PYTHON`` is unset, this interpreter instead, so the processes can import sparktap and its
      dependencies.
    - Precompiled pyspark (``bytecode.py``; ``spark.sparktap.precompiledPyspark``, default true): a directory on
      their ``PYTHONPATH`` whose start-up hook lets them import pyspark from a copy of Spark's pyspark.zip with
      bytecode. Both travel in the data source's Python function (its ``pythonExec`` and ``envVars``), which
      Spark uses for those processes only: the session's other Python UDFs are not affected.
    - Preloaded daemons (``spark.sparktap.preloadWorkers``, default true; with the precompiled pyspark only): the
      same hook makes the data sources' ``pyspark.daemon`` import its worker module and the source before it
      forks workers (``bytecode.PRELOAD``).
    """
    from sparktap.collector.streaming.bytecode import PRELOAD_ENV, daemon_preload, worker_pythonpath

    context = spark.sparkContext
    previous = context.pythonExec
    environment = dict(context.environment)
    if not os.environ.get("PYSPARK_PYTHON") and sys.executable:
        context.pythonExec = sys.executable
    extra = worker_pythonpath(spark)
    if extra:
        context.environment["PYTHONPATH"] = os.pathsep.join(p for p in (extra, environment.get("PYTHONPATH")) if p)
        preload = daemon_preload(spark)
        if preload:
            context.environment[PRELOAD_ENV] = preload
    try:
        yield
    finally:
        context.pythonExec = previous
        context.environment.clear()
        context.environment.update(environment)
