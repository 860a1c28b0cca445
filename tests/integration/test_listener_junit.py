"""The listener's pure-Java units under JUnit (tests/java): redaction with the shared canaries, JSON writing, stage
quantiles, the line check, the identifier rule, the replay's cuts of task end lines, and the listener core against
the contract's example events (constructed Spark events posted through its replay seam, no Spark run). JUnit's
console launcher comes from Maven Central (mvn, cached); the tests run against the Spark 4 listener jar on this
machine's JDK 17."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.junit import run_junit

pytestmark = pytest.mark.integration

# 10 classes: RedactorTest 11 + 32 canaries (tests/java/redaction_cases.tsv), ConnectTrackerTest 3, JsonOutTest 4,
# StageStatsTest 5, SparkLineTest 5, IdentifiersTest 3, ExecutorTrackerTest 2, ReplayTrimTest 4, ContractExamplesTest 8,
# TableAccessTest 5
EXPECTED_TESTS = 89


def test_junit_tests_of_the_listener_pass(tmp_path: Path) -> None:
    run = run_junit(tmp_path)
    assert run.failed == [], run.output[-4000:]
    assert (run.tests, run.failures, run.errors, run.skipped) == (EXPECTED_TESTS, 0, 0, 0), run.output[-4000:]
