"""Hostile identifiers (a Spark user controls ``spark.sparktap.cluster`` and can shape app ids) and real ones.

Shared by the collector's identifier tests and the dashboard/alert injection tests."""

from __future__ import annotations

INJECTION = "\\') UNION ALL SELECT concat(version(), toString(4242)) --"
"""The issue's stored injection (without quotes, which ``singlequote`` would escape): ``${cluster:singlequote}``
made it ``'\\\\'') UNION ALL …``, a literal ``'\\\\'`` then SQL. Executed, it returns ``injected_marker(version)``."""


def injected_marker(server_version: str) -> str:
    """What ``INJECTION`` returns when it runs as SQL (never equal to any stored value)."""
    return f"{server_version}4242"


CANARIES: dict[str, str] = {
    "backslash-quote": "\\'",
    "backslashes": "\\\\",
    "drop": "'; DROP TABLE sparktap.app_start --",
    "macro": "$__timeFilter",
    "macro-call": "$__timeFilter(event_time) OR 1",
    "variable": "${cluster}",
    "union": INJECTION,
    "long": "a" * 300,
    "one-too-long": "b" * 129,
    "control": "prod\x1b[31m\x07",
    "nul": "prod\x00",
    "trailing-newline": "prod\n",
    "space": "prod eu",
    "leading-dash": "-prod",
    "empty": "",
    "non-ascii": "prod\u2028",
}
"""name -> a value every identifier check refuses (``empty`` is refused except for ``app_attempt``)."""

REAL_IDS: tuple[str, ...] = (
    "app-20261124101500-0001",  # standalone
    "local-1764000000000",  # local
    "application_1764000000000_0001",  # YARN
    "spark-0123456789abcdef0123456789abcdef",  # Kubernetes
    "20261124-101500-16777343-5050-1234-0001",  # Mesos framework id + app
    "driver",  # executor ids
    "17",
    "1",  # attempts
    "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",  # streaming query / run ids
    "prod-eu.team_a:batch@dc1/x+y=z",
    "c" * 128,
)
"""Identifiers real clusters produce, all accepted."""
