"""The PySpark helper's Spark conf (no JVM is started: a builder only records options) and the CLI commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import sparktap.listener
from sparktap.config import parse_kafka_options
from sparktap.errors import ConfigError
from sparktap.listener.cli import listener_jar


def test_spark_conf_maps_settings_and_passes_kafka_through() -> None:
    conf = sparktap.listener.spark_conf(
        bootstrap_servers="k:9092",
        topic="events",
        cluster="prod",
        tasks="sample:0.1",
        queue_capacity=5000,
        enabled=True,
        kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
    )
    assert conf == {
        "spark.jars": str(sparktap.listener.jar_path()),
        "spark.extraListeners": "io.sparktap.listener.SparkTapListener",
        "spark.sparktap.relay.python": sys.executable,
        "spark.sparktap.transport": "relay",
        "spark.sparktap.kafka.bootstrap.servers": "k:9092",
        "spark.sparktap.kafka.topic": "events",
        "spark.sparktap.cluster": "prod",
        "spark.sparktap.tasks": "sample:0.1",
        "spark.sparktap.queueCapacity": "5000",
        "spark.sparktap.enabled": "true",
        "spark.sparktap.kafka.security.protocol": "SASL_SSL",
        "spark.sparktap.kafka.sasl.mechanism": "PLAIN",
    }


def test_unknown_setting_and_missing_bootstrap_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown sparktap listener setting.*bootstrap"):
        sparktap.listener.spark_conf(bootstrap_servers="k:9092", topik="x")
    with pytest.raises(ConfigError, match="bootstrap_servers is required"):
        sparktap.listener.spark_conf(cluster="prod")
    assert "spark.sparktap.kafka.bootstrap.servers" not in sparktap.listener.spark_conf(enabled=False)


def test_enable_extends_jars_and_listeners_on_a_real_builder() -> None:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.config("spark.jars", "/opt/other.jar").config("spark.extraListeners", "a.B")
    builder = sparktap.listener.enable(builder, bootstrap_servers="k:9092")
    options = builder._options
    assert options["spark.jars"] == f"/opt/other.jar,{sparktap.listener.jar_path()}"
    assert options["spark.extraListeners"] == "a.B,io.sparktap.listener.SparkTapListener"
    assert options["spark.sparktap.kafka.bootstrap.servers"] == "k:9092"
    again = sparktap.listener.enable(builder, bootstrap_servers="k:9092")
    assert again._options["spark.extraListeners"] == "a.B,io.sparktap.listener.SparkTapListener"


def test_listener_jar_command_prints_the_jar_of_each_spark_line() -> None:
    result = CliRunner().invoke(listener_jar, [])
    assert result.exit_code == 0
    # this venv runs pyspark 4: the Scala 2.13 jar
    assert result.output.strip() == str(sparktap.listener.jar_path())
    assert result.output.strip().endswith("/sparktap-listener-spark4_2.13.jar")
    for version, jar in [
        ("3.3", "sparktap-listener-spark3_2.12.jar"),
        ("3.4.4", "sparktap-listener-spark3_2.12.jar"),
        ("3.5", "sparktap-listener-spark3_2.12.jar"),
        ("4.0", "sparktap-listener-spark4_2.13.jar"),
        ("4.3.0", "sparktap-listener-spark4_2.13.jar"),
    ]:
        result = CliRunner().invoke(listener_jar, ["--spark-version", version])
        assert result.exit_code == 0, result.output
        assert result.output.strip().endswith("/" + jar)
    for unsupported in ("3.2", "2.4.8", "x"):
        result = CliRunner().invoke(listener_jar, ["--spark-version", unsupported])
        assert result.exit_code != 0
        assert isinstance(result.exception, ConfigError)
        assert "supported are Spark 3.3-3.5 (Scala 2.12) and Spark 4.x (Scala 2.13)" in str(result.exception)


def test_the_helper_chooses_the_relay_unless_told_otherwise() -> None:
    """A PySpark driver has a Python: the helper picks the relay (a quarter of the JVM producer's driver CPU); a
    transport given, or already on the builder or in spark-defaults.conf, is kept (the jar's own default is kafka)."""
    key = "spark.sparktap.transport"
    assert sparktap.listener.spark_conf(bootstrap_servers="k:9092")[key] == "relay"
    assert sparktap.listener.spark_conf(bootstrap_servers="k:9092", transport="kafka")[key] == "kafka"
    assert key not in sparktap.listener.spark_conf(bootstrap_servers="k:9092", existing={key: "kafka"})


def test_enable_takes_bootstrap_servers_from_the_builder_or_spark_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import SparkSession

    key = "spark.sparktap.kafka.bootstrap.servers"
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # an empty conf dir: no spark-defaults.conf
    with pytest.raises(ConfigError, match="or set spark.sparktap.kafka.bootstrap.servers on the builder or in"):
        sparktap.listener.enable(SparkSession.Builder(), cluster="prod")
    # on the builder already
    builder = sparktap.listener.enable(SparkSession.Builder().config(key, "b:9092"), cluster="prod")
    assert builder._options[key] == "b:9092"
    assert builder._options["spark.extraListeners"] == "io.sparktap.listener.SparkTapListener"
    # in spark-defaults.conf (whitespace- and =-separated entries, comments)
    (tmp_path / "spark-defaults.conf").write_text(
        f"# cluster defaults\n{key}   d1:9092,d2:9092\nspark.sparktap.cluster=prod\n! old comment\n"
    )
    assert sparktap.listener.spark_defaults() == {key: "d1:9092,d2:9092", "spark.sparktap.cluster": "prod"}
    builder = sparktap.listener.enable(SparkSession.Builder())
    assert key not in builder._options  # Spark reads it from spark-defaults.conf itself
    assert builder._options["spark.jars"] == str(sparktap.listener.jar_path())


def test_relay_drainparse_kafka_options() -> None:
    assert parse_kafka_options(("security.protocol=SSL", "ssl.ca.location=/x=y")) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/x=y",
    }
    with pytest.raises(ConfigError, match="-X expects key=value"):
        parse_kafka_options(("oops",))


@pytest.mark.parametrize("doc", ["README.md", "docs/install-listener.md"])
def test_documented_enable_calls_use_real_settings(doc: str) -> None:
    """Every `sparktap.listener.enable(...)` snippet in the docs would run: its keywords are real settings."""
    import ast
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / doc).read_text()
    calls = []
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("listener.enable"):
                calls.append(node)
    assert calls, f"{doc} shows no enable() call"
    for call in calls:
        names = {kw.arg for kw in call.keywords}
        assert "bootstrap_servers" in names
        assert names - {"kafka"} <= set(sparktap.listener.SETTINGS), ast.unparse(call)
