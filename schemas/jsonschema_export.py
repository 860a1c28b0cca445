"""Export the JSON Schema of every event (checked in under schemas/jsonschema/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.parse import EVENT_ADAPTER

SCHEMA_DIR = Path(__file__).resolve().parent / "jsonschema"


def render() -> dict[str, str]:
    """File name -> JSON text, for the union and for each event type."""
    files: dict[str, Any] = {"events.schema.json": EVENT_ADAPTER.json_schema(mode="serialization")}
    for event_type, model in EVENT_TYPES.items():
        files[f"{event_type}.schema.json"] = model.model_json_schema(mode="serialization")
    return {name: json.dumps(schema, indent=2, sort_keys=True) + "\n" for name, schema in files.items()}


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of files that differ from (or are missing against) the models."""
    return [
        name
        for name, text in render().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


if __name__ == "__main__":
    for p in write():
        print(p)
