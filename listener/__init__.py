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

import os
import re
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
    "descriptions": "spark.sparktap.descriptions",
    "streaming_progress_interval_ms": "spark.sparktap.streaming.progressIntervalMs",
    "executor_metrics": "spark.sparktap.executorMetrics.enabled",
    "executor_max_heartbeats_per_second": "spark.sparktap.executorMetrics.maxHeartbeatsPerSecond",
    "tags": "spark.sparktap.tags",
    "queue_capacity": "spark.sparktap.queueCapacity",
    "health_interval_ms": "spark.sparktap.healthIntervalMs",
    "stage_quantile_samples": "spark.sparktap.stageQuantileSamples",
    "transport": "spark.sparktap.transport",
    "transport_stall_ms": "spark.sparktap.transport.stallMs",
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


def running_spark_version() -> str | None:
    """The version of the pyspark installed with this Python ("3.5.9"), without starting anything; None if absent."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("pyspark")
    except PackageNotFoundError:
        return None


def jar_path(spark_version: str | None = None, rebuild: bool = False) -> Path:
    """The listener jar for this Spark version (default: the installed pyspark's), built from listener/java/ if
    missing or when ``rebuild``: ``sparktap-listener-spark3_2.12.jar`` for Spark 3.3–3.5,
    ``sparktap-listener-spark4_2.13.jar`` for Spark 4.x."""
    from sparktap.listener import javabuild

    version = spark_version or running_spark_version()
    if not version:
        raise ConfigError(
            "cannot tell which listener jar to use: pyspark is not installed here; pass the cluster's Spark version, "
            "e.g. `sparktap listener-jar --spark-version 3.5` (3.3-3.5: Scala 2.12 jar, 4.x: Scala 2.13 jar)"
        )
    try:
        line = javabuild.line_for(version)
    except javabuild.JavaBuildError as exc:
        raise ConfigError(str(exc)) from exc
    jar = javabuild.JAR_DIR / line.jar_name
    if rebuild or not jar.is_file():
        if not javabuild.sources():
            raise ConfigError(f'the listener jar is missing at path="{jar}" and there are no Java sources to build it')
        try:
            return javabuild.build_jar(line, force=rebuild)
        except javabuild.JavaBuildError as exc:
            raise ConfigError(f"cannot build the listener jar: {exc}") from exc
    return jar


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def spark_conf(
    *,
    kafka: Mapping[str, Any] | None = None,
    spark_version: str | None = None,
    existing: Mapping[str, str] | None = None,
    **settings: Any,
) -> dict[str, str]:
    """The Spark conf that turns the listener on: ``spark.jars``, ``spark.extraListeners`` and ``spark.sparktap.*``.

    Keywords are the names in ``SETTINGS`` (``bootstrap_servers`` is required unless ``enabled=False`` or
    ``existing``, the conf already in place, has it); ``kafka`` holds librdkafka settings (``security.protocol``,
    ``sasl.*``, ``ssl.*`` …) passed to the relay. The jar is the one for ``spark_version`` (default: the installed
    pyspark's). The transport is the relay unless ``transport`` or ``existing`` says otherwise (the jar's own default,
    without this helper, is the producer in the driver JVM); the relay runs on this Python (``sys.executable``) unless
    ``relay_python`` says otherwise.
    """
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        names = ", ".join(sorted(SETTINGS))
        raise ConfigError(f"unknown sparktap listener setting(s) {', '.join(unknown)}: use kafka={{...}} or {names}")
    conf: dict[str, str] = {
        "spark.jars": str(jar_path(spark_version)),
        "spark.extraListeners": LISTENER_CLASS,
        SETTINGS["relay_python"]: sys.executable,
    }
    if settings.get("transport") is None and SETTINGS["transport"] not in (existing or {}):
        # A PySpark driver has this Python: the relay costs the driver JVM a quarter of the producer's CPU per event
        # (docs/benchmarks.md, Transports). The jar alone (no helper) defaults to the producer in the JVM.
        conf[SETTINGS["transport"]] = "relay"
    for name, value in settings.items():
        if value is not None:
            conf[SETTINGS[name]] = _value(value)
    for key, value in (kafka or {}).items():
        conf[f"{PREFIX}kafka.{key}"] = _value(value)
    merged = {**(existing or {}), **conf}
    enabled = merged.get(SETTINGS["enabled"], "true").strip().lower() != "false"
    if enabled and not merged.get(SETTINGS["bootstrap_servers"], "").strip():
        raise ConfigError(
            "bootstrap_servers is required: enable(builder, bootstrap_servers='kafka:9092'), or set "
            f"{SETTINGS['bootstrap_servers']} on the builder or in spark-defaults.conf"
        )
    return conf


def spark_defaults() -> dict[str, str]:
    """The properties of the spark-defaults.conf a driver started from here reads: ``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, else the installed pyspark's ``conf/``; empty when there is none."""
    candidates = []
    if os.environ.get("SPARK_CONF_DIR"):
        candidates.append(Path(os.environ["SPARK_CONF_DIR"]))
    elif os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "conf")
    else:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is not None and spec.origin is not None:
            candidates.append(Path(spec.origin).parent / "conf")
    for folder in candidates:
        path = folder / "spark-defaults.conf"
        if path.is_file():
            return parse_properties(path.read_text(encoding="utf-8", errors="replace"))
    return {}


def parse_properties(text: str) -> dict[str, str]:
    """``key value`` / ``key=value`` / ``key: value`` lines, ``#`` and ``!`` comments (the subset Spark's files use)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)$", line)
        if match:
            out[match.group(1)] = match.group(2).strip()
        else:
            out[line] = ""
    return out


def _merge_list(existing: str | None, addition: str) -> str:
    items = [item for item in (existing or "").split(",") if item.strip()]
    if addition not in items:
        items.append(addition)
    return ",".join(items)


def enable(builder: B, *, kafka: Mapping[str, Any] | None = None, **settings: Any) -> B:
    """Add the listener to a ``SparkSession.builder`` and return the builder.

    The jar is the one for the installed pyspark's line. Settings already on the builder or in spark-defaults.conf
    count (``bootstrap_servers`` may come from there). ``spark.jars`` and ``spark.extraListeners`` are extended, not
    replaced. If this Python process already runs a Spark driver JVM (an earlier session was stopped), the jar is
    also added to that JVM's class loader, because ``spark.jars`` only reaches the driver's class path when the JVM
    starts.
    """
    options: dict[str, Any] = getattr(builder, "_options", {}) or {}
    existing = {**spark_defaults(), **{str(k): str(v) for k, v in options.items()}}
    conf = spark_conf(kafka=kafka, existing=existing, **settings)
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
