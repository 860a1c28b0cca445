"""The server insert path leaves to the server only the Arrow columns whose every value is the column's literal
DEFAULT (``storage/native.py``, ``left_to_defaults``): the server then stores the same values."""

from __future__ import annotations

import pyarrow as pa

from sparktap.store.native import left_to_defaults

DEFAULTS = {"schema_version": 1, "schema_minor": 1, "event_type": "task_end", "flag": 0}


def test_only_columns_equal_to_their_default_in_every_row_are_left_out() -> None:
    columns = {
        "schema_version": pa.array([1, 1, 1], pa.int64()),  # constant, the default: left out
        "schema_minor": pa.array([1, 2, 1], pa.int64()),  # one row differs: sent
        "event_type": pa.array(["task_end"] * 3),  # constant, the default: left out
        "seq": pa.array([1, 2, 3], pa.int64()),  # no default: sent
        "flag": pa.array([0, None, 0], pa.int64()),  # a null (not the default): sent
        "cluster": pa.array(["task_end"] * 3),  # the same text, but not its column's default: sent
    }
    kept = left_to_defaults(columns, DEFAULTS)
    assert list(kept) == ["schema_minor", "seq", "flag", "cluster"]
    assert all(kept[name] is columns[name] for name in kept)


def test_a_constant_other_than_the_default_and_python_lists_are_sent() -> None:
    columns = {
        "schema_version": pa.array([2, 2], pa.int64()),
        "event_type": pa.array(["stage_end", "stage_end"]),
        "schema_minor": [1, 1],  # Python values (the pydantic path): never left out
    }
    assert list(left_to_defaults(columns, DEFAULTS)) == ["schema_version", "event_type", "schema_minor"]


def test_every_column_is_kept_when_all_would_go_and_empty_columns_are_kept() -> None:
    columns = {"schema_version": pa.array([1], pa.int64()), "event_type": pa.array(["task_end"])}
    assert list(left_to_defaults(columns, DEFAULTS)) == ["schema_version", "event_type"]
    empty = {"schema_version": pa.array([], pa.int64()), "seq": pa.array([], pa.int64())}
    assert list(left_to_defaults(empty, DEFAULTS)) == ["schema_version", "seq"]
