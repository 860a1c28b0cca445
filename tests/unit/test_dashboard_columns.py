"""The panel contract's column table (tests/support/dashboard_columns.py) names real panels and finds their queries
whatever the database the dashboards are built for."""

from __future__ import annotations

from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panel_queries
from tests.support.dashboard_columns import COLUMNS, PANEL_COLUMNS


def test_every_declared_panel_exists_and_is_found_by_its_query() -> None:
    found = {}
    for board in all_dashboards(GrafanaConfig(database="elsewhere")):
        for title, sql in panel_queries(board):
            if (board["uid"], title) in PANEL_COLUMNS:
                found[(board["uid"], title)] = COLUMNS.get(sql)
    assert found == PANEL_COLUMNS
    assert len(PANEL_COLUMNS) == 53
