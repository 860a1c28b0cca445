"""The envelope every event carries, and the contract's version (``sparktap.schemas.events`` re-exports all of it).

Rules (docs/architecture.md, Event contract):
- one compact JSON object per Kafka message, key = ``app_id``;
- within a major ``schema_version`` only new event types or new optional fields are added;
- readers ignore unknown fields and recognise (not reject) unknown event types;
- the exported JSON Schema is strict (no additional properties): it checks what *we* produce.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from sparktap.schemas.types import EpochMillis, Ident, Label, OptionalIdent

SCHEMA_VERSION = 1
"""Major version of the contract. Readers accept this major with any ``schema_minor``."""
SCHEMA_MINOR = 3
"""Minor version: bumped when optional fields or event types are added."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, json_schema_extra={"additionalProperties": False})


class Envelope(_Model):
    """Fields on every event."""

    schema_version: Annotated[int, Field(ge=1)] = SCHEMA_VERSION
    schema_minor: Annotated[int, Field(ge=0)] = SCHEMA_MINOR
    event_type: str
    cluster: Ident = Field(description="from spark.sparktap.cluster (an identifier: schemas/types.py)")
    app_id: Ident
    app_attempt: OptionalIdent = Field(
        default="", description="Spark's attempt id; empty when the cluster manager has none"
    )
    app_name: Label
    seq: Annotated[int, Field(ge=1, description="per application attempt, 1, 2, 3 …; a gap means loss")]
    emitted_at_ms: EpochMillis
    event_time_ms: EpochMillis = Field(description="when the thing happened, per Spark")
