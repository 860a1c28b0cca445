"""The dedup and plain views over every table."""

from __future__ import annotations

import pytest

from sparktap.schemas.schema import schema_for
from sparktap.store.views import ensure_plain_copies, listener_drops_sql, seq_gaps_sql, view_statements


@pytest.mark.parametrize("version", [(26, 9), (18, 16, 1)], ids=lambda v: ".".join(map(str, v)))
def test_views_cover_every_table(version: tuple[int, ...]) -> None:
    schema = schema_for(version, "sparktap")
    gaps = seq_gaps_sql(schema)
    assert gaps.count("UNION ALL") == len(schema.tables) - 1
    for table in schema.tables:
        assert f"`sparktap`.`{table}`" in gaps
    assert "`sparktap`.`listener_health`" in listener_drops_sql(schema)
    assert sorted(view_statements(schema)) == ["listener_drops", "seq_gaps"]

    class Recorder:
        def __init__(self) -> None:
            self.sql: list[str] = []

        def command(self, sql: str) -> None:
            self.sql.append(sql)

    recorder = Recorder()
    copies = ensure_plain_copies(recorder, schema)  # type: ignore[arg-type]
    assert copies == sorted(f"{t}_plain" for t in schema.tables)
    assert all("ENGINE = MergeTree ORDER BY" in sql and "Replacing" not in sql for sql in recorder.sql)
