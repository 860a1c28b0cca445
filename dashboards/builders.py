"""Small typed helpers that build Grafana dashboard JSON (plain dicts) for the ClickHouse datasource.

Every panel goes through ``panel()``, which requires a title, a description and a unit, so no panel can miss them.
There are no field overrides: the dashboard JSON schema (grafana-foundation-sdk, from Grafana's CUE kinds) types
``MatcherConfig.options`` and ``DynamicConfigValue.value`` as objects, so a ``byName`` override cannot validate;
each panel is designed around one unit instead (tables carry the unit in their column names).
Queries are ``grafana-clickhouse-datasource`` SQL targets (``editorType: sql``, ``format`` 0 = time series,
1 = table). Layout is by ``Grid``: panels flow left to right on a 24-column grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sparktap.dashboards.defaults import (
    DATASOURCE_UID,
    REFRESH,
    SCHEMA_VERSION,
    TAGS,
    TIME_FROM,
    datasource_ref,
)

Json = dict[str, Any]
Format = Literal["table", "time_series"]
PLUGIN_VERSION = "4.20.0"

_FORMAT = {"time_series": 0, "table": 1}
_QUERY_TYPE = {"time_series": "timeseries", "table": "table"}


def target(sql: str, fmt: Format = "table", ref_id: str = "A", datasource_uid: str = DATASOURCE_UID) -> Json:
    """A ClickHouse SQL query of a panel."""
    return {
        "refId": ref_id,
        "datasource": datasource_ref(datasource_uid),
        "editorType": "sql",
        "format": _FORMAT[fmt],
        "queryType": _QUERY_TYPE[fmt],
        "rawSql": sql.strip(),
    }


def steps(*pairs: tuple[float | None, str]) -> Json:
    """Absolute thresholds: ``steps((None, "green"), (1, "red"))``."""
    return {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in pairs]}


def value_colors(colors: dict[str, str]) -> list[Json]:
    """Value mappings that colour text values (e.g. severities)."""
    return [{"type": "value", "options": {k: {"color": v, "index": i} for i, (k, v) in enumerate(colors.items())}}]


def panel(
    kind: str,
    title: str,
    description: str,
    unit: str,
    sql: str,
    *,
    fmt: Format = "table",
    width: int = 12,
    height: int = 8,
    options: Json | None = None,
    custom: Json | None = None,
    thresholds: Json | None = None,
    mappings: Sequence[Json] = (),
    decimals: int | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    links: Sequence[Json] = (),
    transformations: Sequence[Json] = (),
    datasource_uid: str = DATASOURCE_UID,
) -> Json:
    """A panel with one SQL query; ``gridPos`` and ``id`` are set by ``Grid``."""
    if not title or not description or not unit:
        raise ValueError("every panel needs a title, a description and a unit")
    defaults: Json = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    if thresholds is not None:
        defaults["thresholds"] = thresholds
    if mappings:
        defaults["mappings"] = list(mappings)
    if custom:
        defaults["custom"] = custom
    if links:
        defaults["links"] = list(links)
    out: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": datasource_ref(datasource_uid),
        "pluginVersion": PLUGIN_VERSION,
        "targets": [target(sql, fmt, datasource_uid=datasource_uid)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options or {},
        "gridPos": {"h": height, "w": width, "x": 0, "y": 0},
    }
    if transformations:
        out["transformations"] = list(transformations)
    return out


def stat_options(color_mode: str = "background", graph: bool = False) -> Json:
    return {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": color_mode,
        "graphMode": "area" if graph else "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "value_and_name",
        "wideLayout": True,
        "showPercentChange": False,
    }


def table_options(sort_by: str | None = None, descending: bool = True) -> Json:
    out: Json = {
        "showHeader": True,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
    }
    if sort_by:
        out["sortBy"] = [{"displayName": sort_by, "desc": descending}]
    return out


def timeseries_options() -> Json:
    return {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def timeseries_custom(draw: str = "line", stack: bool = False, fill: int = 10) -> Json:
    return {
        "drawStyle": draw,
        "lineWidth": 1,
        "fillOpacity": fill,
        "pointSize": 4,
        "showPoints": "auto",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "axisPlacement": "auto",
        "gradientMode": "none",
    }


def barchart_options(horizontal: bool = False, stacked: bool = False, x_field: str | None = None) -> Json:
    out: Json = {
        "orientation": "horizontal" if horizontal else "vertical",
        "stacking": "normal" if stacked else "none",
        "showValue": "never",
        "groupWidth": 0.7,
        "barWidth": 0.9,
        "xTickLabelRotation": -30,
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
        "tooltip": {"mode": "multi", "sort": "none"},
    }
    if x_field:
        out["xField"] = x_field
    return out


@dataclass
class Grid:
    """Places panels left to right, wrapping at 24 columns, and numbers them."""

    panels: list[Json] = field(default_factory=list)
    x: int = 0
    y: int = 0
    row_height: int = 0

    def add(self, *items: Json) -> Grid:
        for item in items:
            pos = item["gridPos"]
            if self.x + pos["w"] > 24:
                self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
            pos["x"], pos["y"] = self.x, self.y
            self.x += pos["w"]
            self.row_height = max(self.row_height, pos["h"])
            item["id"] = len(self.panels) + 1
            self.panels.append(item)
        return self

    def row(self, title: str) -> Grid:
        """A (non-collapsible here: always expanded) row header on its own line."""
        if self.x:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": len(self.panels) + 1,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            }
        )
        self.y += 1
        return self


def query_variable(
    name: str,
    label: str,
    description: str,
    sql: str,
    *,
    multi: bool,
    include_all: bool,
    datasource_uid: str = DATASOURCE_UID,
) -> Json:
    """A template variable filled by a ClickHouse query, refreshed when the time range changes."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "description": description,
        "datasource": datasource_ref(datasource_uid),
        "query": sql.strip(),
        "definition": sql.strip(),
        "refresh": 2,
        "sort": 0,
        "multi": multi,
        "includeAll": include_all,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}
        if include_all
        else {"text": "", "value": ""},
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }


def dashboard(
    uid: str, title: str, description: str, grid: Grid, variables: Sequence[Json], links: Sequence[Json] = ()
) -> Json:
    """A whole dashboard, UTC, refreshing every ``REFRESH``, last ``TIME_FROM`` by default."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(TAGS),
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": TIME_FROM, "to": "now"},
        "timepicker": {"refresh_intervals": ["10s", "30s", "1m", "5m", "15m", "1h"]},
        "refresh": REFRESH,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "weekStart": "",
        "liveNow": False,
        "links": list(links),
        "templating": {"list": list(variables)},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "panels": grid.panels,
    }


def dashboard_link(title: str, uid: str, slug: str, keep_vars: bool = True) -> Json:
    return {
        "title": title,
        "type": "link",
        "url": f"/d/{uid}/{slug}",
        "icon": "dashboard",
        "tooltip": title,
        "includeVars": keep_vars,
        "keepTime": True,
        "asDropdown": False,
        "targetBlank": False,
        "tags": [],
    }
