"""The settings of the ``sparktap`` command as a whole: every group of every part (``SPARKTAP_<GROUP>__<FIELD>``).
The parts never import this module: each reads the groups it needs (``sparktap.config.load_kafka_settings``,
``sparktap.store.settings``, ``sparktap.collector.settings``, ``sparktap.detection.settings``); the detection
process's settings are the widest, and the command's."""

from __future__ import annotations

from sparktap.collector.settings import CollectorSettings, IngestSettings
from sparktap.config import KafkaSettings
from sparktap.detection.prices import CostSettings
from sparktap.detection.settings import AlertSettings
from sparktap.detection.settings import DetectionSettings as Settings
from sparktap.detection.settings import load_detection_settings as load_settings
from sparktap.store.settings import ClickHouseSettings

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
