"""Field annotations shared by the event models: they carry the ClickHouse column type with the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field


@dataclass(frozen=True)
class Column:
    """ClickHouse column hints for a field: its base type and whether it is a low-cardinality string."""

    type: str
    low_cardinality: bool = False


# Counters, sizes and durations reported by Spark are never negative.
Count = Annotated[int, Field(ge=0), Column("UInt64")]
Bytes = Annotated[int, Field(ge=0), Column("UInt64")]
Millis = Annotated[int, Field(ge=0), Column("UInt64")]
Nanos = Annotated[int, Field(ge=0), Column("UInt64")]
# Epoch milliseconds (UTC).
EpochMillis = Annotated[int, Field(ge=0), Column("Int64")]
# Spark ids (job, stage, task, SQL execution, attempt numbers).
Id = Annotated[int, Field(ge=0), Column("Int64")]
# Short, repetitive strings (cluster, executor id, host, status, locality …).
Label = Annotated[str, Column("String", low_cardinality=True)]
