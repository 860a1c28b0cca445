"""One ``Settings`` per sparktap process: the parts' settings groups composed, read from ``SPARKTAP_<GROUP>__<FIELD>``
environment variables (pydantic-settings). The groups live beside the code they configure."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from sparktap.collector.settings import CollectorSettings
from sparktap.collector.storage.target import ClickHouseSettings
from sparktap.config import SETTINGS_CONFIG, KafkaSettings, settings_error
from sparktap.detection.settings import AlertSettings

__all__ = ["AlertSettings", "ClickHouseSettings", "CollectorSettings", "KafkaSettings", "Settings", "load_settings"]


class Settings(BaseSettings):
    """Settings of one sparktap process; every field can be set as SPARKTAP_<GROUP>__<FIELD>."""

    model_config = SETTINGS_CONFIG

    kafka: KafkaSettings = KafkaSettings()
    clickhouse: ClickHouseSettings = ClickHouseSettings()
    alerts: AlertSettings = AlertSettings()
    collector: CollectorSettings = CollectorSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from exc
