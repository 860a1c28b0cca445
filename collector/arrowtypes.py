"""The Arrow type of each ClickHouse column type: shared by the decoding path (``arrowpath.py``) and the chDB
backend (``storage/embedded.py``), so decoding imports no storage backend."""

from __future__ import annotations

import re
from typing import Any

_WRAPPER_RE = re.compile(r"^(LowCardinality|Nullable)\((.*)\)$")


def unwrap(ch_type: str) -> str:
    """The type inside ``LowCardinality(...)`` / ``Nullable(...)``."""
    while match := _WRAPPER_RE.match(ch_type):
        ch_type = match.group(2)
    return ch_type


def split_args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a type (``String, Array(Int64)``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    out.append(inner[start:].strip())
    return out


def arrow_type(ch_type: str) -> Any:
    """The pyarrow type a ClickHouse column is inserted from."""
    import pyarrow as pa

    base = unwrap(ch_type)
    simple = {
        "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(),
        "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
        "UInt8": pa.bool_(), "Bool": pa.bool_(),  # UInt8 columns hold the models' booleans
        "Float32": pa.float32(), "Float64": pa.float64(), "String": pa.string(),
    }  # fmt: skip
    if base in simple:
        return simple[base]
    if base.startswith("Array(") and base.endswith(")"):
        return pa.list_(arrow_type(base[6:-1]))
    if base.startswith("Map(") and base.endswith(")"):
        key, value = split_args(base[4:-1])
        return pa.map_(arrow_type(key), arrow_type(value))
    if base.startswith("DateTime"):
        return pa.timestamp("ms", tz="UTC")
    raise ValueError(f"no Arrow type for ClickHouse type {ch_type!r}")
