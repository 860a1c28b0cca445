"""sparktap.listener: the Java SparkListener (shipped as a jar), its Python relay, and the PySpark helper.

Attach the listener to a PySpark application::

    from pyspark.sql import SparkSession
    import sparktap.listener

    builder = SparkSession.builder.appName("nightly-etl")
    spark = sparktap.listener.enable(builder, bootstrap_servers="kafka:9092", cluster="prod").getOrCreate()

Cluster-wide installation through ``spark-defaults.conf`` is described in docs/install-listener.md.
This module imports neither pyspark nor confluent-kafka at import time.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from sparktap.errors import ConfigError

LISTENER_CLASS = "io.sparktap.listener.SparkTapListener"
PREFIX = "spark.sparktap."

SETTINGS: dict[str, str] = {
    "bootstrap_servers": "spark.sparktap.kafka.bootstrap.servers",
    "topic": "spark.sparktap.kafka.topic",
    "cluster": "spark.sparktap.cluster",
    "enabled": "spark.sparktap.enabled",
    "tasks": "spark.sparktap.tasks",
    "queue_capacity": "spark.sparktap.queueCapacity",
    "health_interval_ms": "spark.sparktap.healthIntervalMs",
    "stage_quantile_samples": "spark.sparktap.stageQuantileSamples",
    "relay_python": "spark.sparktap.relay.python",
    "spool_dir": "spark.sparktap.relay.spoolDir",
    "spool_max_bytes": "spark.sparktap.relay.spoolMaxBytes",
    "buffer_max_events": "spark.sparktap.relay.bufferMaxEvents",
    "flush_timeout_ms": "spark.sparktap.relay.flushTimeoutMs",
    "relay_start_timeout_ms": "spark.sparktap.relay.startTimeoutMs",
    "relay_max_backoff_ms": "spark.sparktap.relay.maxBackoffMs",
    "relay_status_interval_ms": "spark.sparktap.relay.statusIntervalMs",
}
"""Keyword of ``enable``/``spark_conf`` -> Spark conf key. ``kafka={...}`` passes librdkafka settings through."""

B = TypeVar("B")


def jar_path(rebuild: bool = False) -> Path:
    """The listener jar shipped in this package (built from listener/java/ if missing or when ``rebuild``)."""
    from sparktap.listener import javabuild

    jar = javabuild.JAR_DIR / javabuild.JAR_NAME
    if rebuild or not jar.is_file():
        if not javabuild.sources():
            raise ConfigError(f'the listener jar is missing at path="{jar}" and there are no Java sources to build it')
        try:
            return javabuild.build_jar(force=rebuild)
        except javabuild.JavaBuildError as exc:
            raise ConfigError(f"cannot build the listener jar: {exc}") from exc
    return jar


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def spark_conf(*, kafka: Mapping[str, Any] | None = None, **settings: Any) -> dict[str, str]:
    """The Spark conf that turns the listener on: ``spark.jars``, ``spark.extraListeners`` and ``spark.sparktap.*``.

    Keywords are the names in ``SETTINGS`` (``bootstrap_servers`` is required unless ``enabled=False``);
    ``kafka`` holds librdkafka settings (``security.protocol``, ``sasl.*``, ``ssl.*`` …) passed to the relay.
    The relay runs on this Python (``sys.executable``) unless ``relay_python`` says otherwise.
    """
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        names = ", ".join(sorted(SETTINGS))
        raise ConfigError(f"unknown sparktap listener setting(s) {', '.join(unknown)}: use kafka={{...}} or {names}")
    conf: dict[str, str] = {
        "spark.jars": str(jar_path()),
        "spark.extraListeners": LISTENER_CLASS,
        SETTINGS["relay_python"]: sys.executable,
    }
    for name, value in settings.items():
        if value is not None:
            conf[SETTINGS[name]] = _value(value)
    for key, value in (kafka or {}).items():
        conf[f"{PREFIX}kafka.{key}"] = _value(value)
    enabled = conf.get(SETTINGS["enabled"], "true") != "false"
    if enabled and not conf.get(SETTINGS["bootstrap_servers"], "").strip():
        raise ConfigError("bootstrap_servers is required: enable(builder, bootstrap_servers='kafka:9092')")
    return conf


def _merge_list(existing: str | None, addition: str) -> str:
    items = [item for item in (existing or "").split(",") if item.strip()]
    if addition not in items:
        items.append(addition)
    return ",".join(items)


def enable(builder: B, *, kafka: Mapping[str, Any] | None = None, **settings: Any) -> B:
    """Add the listener to a ``SparkSession.builder`` and return the builder.

    ``spark.jars`` and ``spark.extraListeners`` are extended, not replaced. If this Python process already runs a
    Spark driver JVM (an earlier session was stopped), the jar is also added to that JVM's class loader, because
    ``spark.jars`` only reaches the driver's class path when the JVM starts.
    """
    conf = spark_conf(kafka=kafka, **settings)
    options: dict[str, Any] = getattr(builder, "_options", {}) or {}
    conf["spark.jars"] = _merge_list(options.get("spark.jars"), conf["spark.jars"])
    conf["spark.extraListeners"] = _merge_list(options.get("spark.extraListeners"), LISTENER_CLASS)
    for key, value in conf.items():
        builder = builder.config(key, value)  # type: ignore[attr-defined]
    load_into_running_jvm()
    return builder


def load_into_running_jvm(jar: Path | None = None) -> bool:
    """Make the listener class loadable by a driver JVM that this process already started; False if none runs."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return False
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        loader.loadClass(LISTENER_CLASS)
        return True
    except Exception:  # noqa: BLE001,S110 - py4j raises Py4JJavaError (ClassNotFoundException): add the jar below
        pass
    if not loader.getClass().getName().endswith("MutableURLClassLoader"):
        return False
    loader.addURL(jvm.java.io.File(str(jar or jar_path())).toURI().toURL())
    return True


__all__ = ["LISTENER_CLASS", "SETTINGS", "enable", "jar_path", "load_into_running_jvm", "spark_conf"]
