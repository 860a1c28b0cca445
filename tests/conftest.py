"""Suite-wide configuration. Service fixtures live in tests/fixtures/ (one module per service)."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.fixtures.services",
    "tests.fixtures.kafka",
    "tests.fixtures.clickhouse",
    "tests.fixtures.clickhouse_cluster",
    "tests.fixtures.spark",
    "tests.fixtures.spark_standalone",
    "tests.fixtures.grafana",
    "tests.fixtures.receiver",
    "tests.fixtures.tpch",
    "tests.fixtures.spark_connect",
    "tests.fixtures.hdfs",
    "tests.scheduling",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Benchmarks are run by `make bench`, never as part of the suite.
    skip_bench = pytest.mark.skip(reason="benchmark: run with `make bench`")
    for item in items:
        if "bench" in item.keywords:
            item.add_marker(skip_bench)
