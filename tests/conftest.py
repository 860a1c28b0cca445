"""Suite-wide configuration. Service fixtures live in tests/fixtures/ (one module per service)."""

from __future__ import annotations

import pytest

from sparktap import native

pytest_plugins = [
    "tests.fixtures.services",
    "tests.fixtures.kafka",
    "tests.fixtures.clickhouse",
    "tests.fixtures.clickhouse_cluster",
    "tests.fixtures.spark",
    "tests.fixtures.spark_standalone",
    "tests.fixtures.grafana",
    "tests.fixtures.helm",
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


@pytest.fixture(autouse=True)
def _native_path(request: pytest.FixtureRequest) -> None:
    """A test marked ``native`` checks the native code itself: it has nothing to check when the switch is off
    (.ci/run's leg with SPARKTAP_NATIVE=off runs everything else on the pure-Python paths); an extension that was
    not built is a skip locally and a failure in CI, like a missing service."""
    if request.node.get_closest_marker("native") is None:
        return
    why = native.unavailable()
    if why is None:
        return
    if native.mode() == "off":
        pytest.skip(f"checks the native path: {why}")
    from tests.fixtures.services import unavailable  # a plugin of this conftest: imported once pytest has it

    unavailable("the native path", why)
