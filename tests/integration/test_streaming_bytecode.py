"""Precompiled pyspark for sparktap's data sources (collector/streaming/bytecode.py) on real Spark local[2].

The Python processes Spark starts for a data source registered by ``register`` import pyspark from the
precompiled copy of Spark's pyspark.zip; a Python UDF of the same session still imports the original zip; the
hook swaps nothing when the original zip is not the file the copy was built from, and runs the sitecustomize that
Python would have run. The sparktap-kafka tests (test_streaming_source.py, test_streaming_pipeline.py) read their
rows through the same setup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StringType, StructField, StructType

from sparktap.collector.streaming import bytecode, data_source_workers
from sparktap.errors import ConfigError

pytestmark = pytest.mark.integration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _pyspark_file() -> str:
    return sys.modules["pyspark"].__file__ or ""


def _preloaded() -> str:
    """What the pyspark.daemon this process was forked from imported before the fork ("-": not such a fork)."""
    return os.environ.get("SPARKTAP_DAEMON_PRELOADED", "-")


class _ProbeReader(DataSourceStreamReader):
    """Reports, through its offsets and rows, where the planning process and the read worker got pyspark from."""

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's method name
        return {"n": 0}

    def latestOffset(self) -> dict:  # type: ignore[override]  # noqa: N802 - the signature without a read limit
        return {"n": 1, "planner": _pyspark_file(), "planner_preloaded": _preloaded()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)] if start["n"] < end["n"] else []

    def read(self, partition: InputPartition) -> Any:
        yield (_pyspark_file(), _preloaded())

    def commit(self, end: dict) -> None:
        pass


class _ProbeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparktap-bytecode-probe"

    def schema(self) -> StructType:  # runs in create_data_source's process: the column's name tells where from
        where = "copy" if "/pyspark-bytecode/" in _pyspark_file() else "zip"
        return StructType([StructField(f"reader_from_{where}", StringType()), StructField("preloaded", StringType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return _ProbeReader()


def test_data_source_processes_import_the_precompiled_pyspark_and_udfs_the_original(
    spark: SparkSession, tmp_path: Path
) -> None:
    original = bytecode.spark_pyspark_zip(spark)
    assert original is not None and original.name == "pyspark.zip"
    directory = bytecode.worker_pythonpath(spark)
    assert directory is not None
    copy = f"{directory}/pyspark.zip/pyspark/__init__.pyc"
    with data_source_workers(spark):
        spark.dataSource.register(_ProbeSource)

    df = spark.readStream.format("sparktap-bytecode-probe").load()
    assert df.columns == ["reader_from_copy", "preloaded"]
    name = f"probe_{uuid.uuid4().hex[:8]}"
    writer = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk"))
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        rows = spark.sql(f"SELECT * FROM {name}").collect()  # noqa: S608 - our own query name
        progress = [p for p in query.recentProgress if int(p["numInputRows"]) > 0]
    finally:
        query.stop()
    # the read worker: forked from a daemon that imported its worker module and the source (and pyarrow before
    # Python 3.12) beforehand
    preloaded = ",".join(("pyspark.worker", *bytecode.PRELOAD))
    assert [(r.reader_from_copy, r.preloaded) for r in rows] == [(copy, preloaded)]
    end = progress[-1]["sources"][0]["endOffset"]
    assert (end if isinstance(end, dict) else json.loads(end)) == {"n": 1, "planner": copy, "planner_preloaded": "-"}

    # the session's other Python code (here an RDD function; pickled by value) keeps Spark's own pyspark.zip and
    # Spark's own daemon, which preloads nothing
    files = spark.sparkContext.parallelize([0], 1).map(
        lambda _: (sys.modules["pyspark"].__file__, os.environ.get("SPARKTAP_DAEMON_PRELOADED", "-"))
    )
    assert files.collect() == [(f"{original}/pyspark/__init__.py", "-")]

    # opt-outs, and a clear error for a wrong value
    assert bytecode.daemon_preload(spark) == ",".join(bytecode.PRELOAD)
    assert bytecode.PRELOAD[0] == "sparktap.collector.streaming.source"
    try:
        spark.conf.set(bytecode.PRELOAD_CONF, "false")
        assert bytecode.daemon_preload(spark) is None
        spark.conf.set(bytecode.PRELOAD_CONF, "sometimes")
        with pytest.raises(ConfigError, match=r'spark.sparktap.preloadWorkers="sometimes" must be true or false'):
            bytecode.daemon_preload(spark)
        spark.conf.unset(bytecode.PRELOAD_CONF)
        spark.conf.set(bytecode.CONF, "false")
        assert bytecode.worker_pythonpath(spark) is None
        spark.conf.set(bytecode.CONF, "maybe")
        with pytest.raises(ConfigError, match=r'spark.sparktap.precompiledPyspark="maybe" must be true or false'):
            bytecode.worker_pythonpath(spark)
    finally:
        spark.conf.unset(bytecode.CONF)
    assert bytecode.worker_pythonpath(spark) == directory


def _import_pyspark(original: Path, hook: Path, chained: Path) -> list[str]:
    """A Python started as Spark starts its workers: Spark's zip first, then the data source's PYTHONPATH."""
    py4j = next(original.parent.parent.parent.glob("python/lib/py4j-*.zip"), None)
    path = os.pathsep.join(str(p) for p in (original, py4j, hook, chained) if p)
    code = "import sys, pyspark; print(pyspark.__file__); print(getattr(sys.modules['sitecustomize'], 'MARK', '-'))"
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_the_hook_swaps_only_the_zip_it_was_built_from_and_chains_sitecustomize(
    spark: SparkSession, tmp_path: Path
) -> None:
    spark_zip = bytecode.spark_pyspark_zip(spark)
    assert spark_zip is not None
    home = tmp_path / "spark"
    (home / "python" / "lib").mkdir(parents=True)
    for item in spark_zip.parent.iterdir():
        shutil.copy2(item, home / "python" / "lib" / item.name)
    original = home / "python" / "lib" / "pyspark.zip"
    hook = bytecode.precompiled(original, root=tmp_path / "cache")
    assert sorted(p.name for p in hook.iterdir()) == ["pyspark.zip", "sitecustomize.py"]
    assert bytecode.precompiled(original, root=tmp_path / "cache") == hook  # built once
    chained = tmp_path / "site"
    chained.mkdir()
    (chained / "sitecustomize.py").write_text("MARK = 'chained'\n")

    assert _import_pyspark(original, hook, chained) == [f"{hook}/pyspark.zip/pyspark/__init__.pyc", "chained"]

    stat = original.stat()  # the same path, another file: the hook leaves Spark's zip in place
    os.utime(original, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert _import_pyspark(original, hook, chained) == [f"{original}/pyspark/__init__.py", "chained"]
