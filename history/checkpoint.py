"""What ``sparktap import`` has already sent, per log: its size and mtime when read, and per application attempt
the last ``seq`` sent. Importing a log again sends nothing when it is unchanged, and only events past that ``seq``
when it grew (an in-progress log): the replay numbers events the same way every time (docs/import.md).

One JSON file per destination, rewritten atomically after each delivery with the logs it confirmed stored
(``--engine spark``: the logs of the tasks that succeeded since the last write together).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparktap.errors import ServiceError

VERSION = 1


def default_path(destination: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(destination.encode()).hexdigest()[:16]
    return cache / "sparktap" / "import" / f"checkpoint-{digest}.json"


@dataclass
class LogState:
    size: int = -1
    mtime_ns: int = -1
    attempts: dict[str, int] = field(default_factory=dict)
    """``app_id`` TAB ``app_attempt`` -> last seq sent"""
    live: bool = False
    """the attempt was found stored by the live listener: never imported"""


class Checkpoint:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.logs: dict[str, LogState] = {}
        if path is not None and path.is_file():
            try:
                data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            if data.get("version") == VERSION:
                for name, entry in data.get("logs", {}).items():
                    self.logs[name] = LogState(
                        int(entry["size"]), int(entry["mtime_ns"]), dict(entry["attempts"]), bool(entry.get("live"))
                    )

    def state(self, log: str) -> LogState:
        return self.logs.get(log) or LogState()

    def unchanged(self, log: str, size: int, mtime_ns: int) -> bool:
        state = self.logs.get(log)
        return state is not None and state.size == size and state.mtime_ns == mtime_ns

    def record(self, log: str, state: LogState) -> None:
        self.record_many({log: state})

    def record_many(self, states: dict[str, LogState]) -> None:
        """Record these logs' states in one write of the file (a write per log costs O(logs) each)."""
        self.logs.update(states)
        if self.path is None or not states:
            return
        body = {
            "version": VERSION,
            "logs": {
                name: {"size": s.size, "mtime_ns": s.mtime_ns, "attempts": s.attempts, "live": s.live}
                for name, s in self.logs.items()
            },
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
            tmp.replace(self.path)
        except OSError as exc:
            raise ServiceError(
                f'cannot write the import checkpoint file="{self.path}": {exc.strerror or exc}; the logs delivered '
                "since the last write are sent again on the next run (deduplicated): fix the path or its "
                "permissions (--checkpoint) and run the import again"
            ) from None
