"""The detection samples (``detection_samples.py``) loaded into a store as the collector would, and their window."""

from __future__ import annotations

from collections.abc import Iterable

from sparktap.schemas.rows import RowBuilder
from sparktap.store import Storage
from tests.support import sample_app

WINDOW = (sample_app.BASE_TIME_MS - 6 * 3_600_000, sample_app.BASE_TIME_MS + 3_600_000)
"""the sample applications' time window"""


def load(storage: Storage, apps: Iterable[sample_app.App]) -> None:
    """Events -> rows (schemas/rows.py) -> the storage, as the collector does: one insert per table for all the
    applications (a collector batch holds many applications' events). An insert costs about the same whatever its
    size (the schema's materialized views run on every block): one per application and table made the panel and
    detection modules' samples hundreds of inserts."""
    builder = RowBuilder(storage.version())
    events = (e.model_dump(mode="json") for app in apps for e in app.events)
    for table, rows in builder.group(events).items():
        storage.insert(table, rows)


class Clock:
    """A settable clock for the alerter (seconds from ``ms``): tests move time forward by setting ``ms``."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000
