"""One ``Settings`` per sparktap process: the parts' settings groups composed, read from ``SPARKTAP_<GROUP>__<FIELD>``
environment variables (pydantic-settings). The groups live beside the code they configure."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sparktap.collector.settings import CollectorSettings, IngestSettings
from sparktap.collector.storage.target import ClickHouseSettings
from sparktap.config import KafkaSettings, settings_error
from sparktap.detection.prices import CostSettings
from sparktap.detection.settings import AlertSettings

__all__ = [
    "AlertSettings",
    "ClickHouseSettings",
    "CollectorSettings",
    "CostSettings",
    "IngestSettings",
    "KafkaSettings",
    "Settings",
    "load_settings",
]


class Settings(IngestSettings):
    """Settings of one sparktap CLI process; every field can be set as SPARKTAP_<GROUP>__<FIELD>. The collector's
    groups (``IngestSettings``: kafka, clickhouse, collector, log_level) plus detection's ``alerts`` and ``cost``
    (prices); only the CLIs and the composition root (``sparktap.cli``) use it, never the collector."""

    alerts: AlertSettings = AlertSettings()
    cost: CostSettings = CostSettings()


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from exc
