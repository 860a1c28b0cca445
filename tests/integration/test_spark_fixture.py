"""The Spark fixtures run real local[2] jobs, and a factory session replaces (then gives back) the shared one."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the conventional alias

pytestmark = pytest.mark.integration


def test_range_count_and_group_by(spark: SparkSession) -> None:
    assert spark.range(1000).count() == 1000
    assert spark.sparkContext.master == "local[2]"

    rows = (
        spark.range(1000)
        .withColumn("bucket", F.col("id") % 3)
        .groupBy("bucket")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .orderBy("bucket")
        .collect()
    )

    # ids 0..999: bucket 0 has 334 ids (0, 3, ..., 999), buckets 1 and 2 have 333 each.
    assert [(r.bucket, r.n, r.total) for r in rows] == [
        (0, 334, sum(range(0, 1000, 3))),
        (1, 333, sum(range(1, 1000, 3))),
        (2, 333, sum(range(2, 1000, 3))),
    ]


def test_factory_session_has_its_own_conf_and_then_the_default_comes_back(
    spark_session_factory: Callable[..., SparkSession], spark: SparkSession
) -> None:
    default_context_id = spark.sparkContext.applicationId

    custom = spark_session_factory({"spark.app.name": "sparktap-factory", "spark.sparktap.cluster": "test-cluster"})

    assert custom.sparkContext.applicationId != default_context_id
    assert custom.conf.get("spark.sparktap.cluster") == "test-cluster"
    assert custom.sparkContext.appName == "sparktap-factory"
    assert spark.sparkContext._jsc is None  # the shared session was stopped: one SparkContext per JVM
    assert custom.range(10).selectExpr("sum(id) AS s").first() == (45,)


def test_default_session_is_back_after_a_factory_test(spark: SparkSession) -> None:
    assert spark.sparkContext.appName == "sparktap-tests"
    assert spark.conf.get("spark.sparktap.cluster", None) is None
    assert spark.range(5).count() == 5


def test_a_later_session_does_not_inherit_the_conf_that_launched_the_jvm(
    spark_session_factory: Callable[..., SparkSession],
) -> None:
    """A session whose launch setting starts a new driver JVM leaves its other settings behind as system properties:
    the next session has none of them."""
    launching = spark_session_factory(
        {"spark.driver.memory": "768m", "spark.sql.cbo.enabled": "true", "spark.sparktap.cluster": "launched"}
    )
    assert launching.sparkContext.getConf().get("spark.sql.cbo.enabled") == "true"
    assert launching.sparkContext._jvm.java.lang.System.getProperty("spark.sql.cbo.enabled") == "true"

    later = spark_session_factory({"spark.driver.memory": "768m", "spark.app.name": "later"})
    conf = later.sparkContext.getConf()
    assert later.sparkContext.appName == "later"
    assert (conf.get("spark.sql.cbo.enabled"), conf.get("spark.sparktap.cluster")) == (None, None)
    assert later.conf.get("spark.sql.cbo.enabled") == "false"  # Spark's default


PROBE_LISTENER = """\
package sparktaptest;

public class ProbeListener extends org.apache.spark.scheduler.SparkListener {
    private final java.util.concurrent.atomic.AtomicInteger jobs = new java.util.concurrent.atomic.AtomicInteger();

    @Override
    public void onJobEnd(org.apache.spark.scheduler.SparkListenerJobEnd jobEnd) {
        jobs.incrementAndGet();
    }

    public int jobs() {
        return jobs.get();
    }
}
"""


def build_probe_jar(workdir: Path) -> Path:
    """Compile a one-class SparkListener against the jars inside the pyspark wheel."""
    if shutil.which("javac") is None or shutil.which("jar") is None:
        pytest.skip("needs javac and jar (a JDK) to build the probe listener")
    source = workdir / "src" / "sparktaptest" / "ProbeListener.java"
    source.parent.mkdir(parents=True)
    source.write_text(PROBE_LISTENER)
    classes, jar = workdir / "classes", workdir / "probe.jar"
    spark_jars = Path(pyspark.__file__).parent / "jars" / "*"
    subprocess.run(["javac", "-nowarn", "-cp", str(spark_jars), "-d", str(classes), str(source)], check=True)
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


def test_factory_loads_a_listener_from_spark_jars_after_the_default_session_started(
    spark: SparkSession, spark_session_factory: Callable[..., SparkSession], tmp_path: Path
) -> None:
    assert spark.range(3).count() == 3  # the driver JVM runs, launched without the probe jar
    jar = build_probe_jar(tmp_path)

    session = spark_session_factory({"spark.jars": str(jar), "spark.extraListeners": "sparktaptest.ProbeListener"})
    rdd = session.sparkContext.parallelize(range(100), 2)  # an RDD action is exactly one job (no AQE re-planning)
    assert rdd.map(lambda x: x * 2).sum() == 9900
    assert rdd.count() == 100

    bus = session.sparkContext._jsc.sc().listenerBus()
    probes = [bus.listeners().get(i) for i in range(bus.listeners().size())]
    probes = [p for p in probes if p.getClass().getName() == "sparktaptest.ProbeListener"]
    assert len(probes) == 1
    bus.waitUntilEmpty(30_000)
    assert probes[0].jobs() == 2
