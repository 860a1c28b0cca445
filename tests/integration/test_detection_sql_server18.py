"""The detection SQL on the Debian clickhouse-server 18.16, which lacks CTEs and more than one JOIN per SELECT: the
scenarios of ``tests/support/detection_samples.py``, a running stage without its submission and a skewed join without
its AQE events give the expected findings (``tests/support/detection_findings.py``), the same with and without the
input probe, reading the tables ``FINAL`` and from the epoch; each names who ran it. On embedded chDB, with each
finding's evidence: test_detection_sql.py."""

from __future__ import annotations

import pytest

from sparktap.store import Storage
from tests.support import detection_samples as samples
from tests.support.detection import WINDOW, load
from tests.support.detection_findings import (
    EXPECTED,
    assert_attributed,
    assert_running_without_submitted,
    by,
    detector,
    found,
    running_without_submitted,
    skew_without_aqe,
)

pytestmark = pytest.mark.integration


def test_same_findings_on_clickhouse_server_18(server_storage: Storage) -> None:
    """The detection SQL needs nothing clickhouse-server 18.16 lacks (no CTEs, one JOIN per SELECT, …)."""
    server_storage.ensure_schema()
    load(server_storage, [*samples.scenario_apps(), running_without_submitted(), skew_without_aqe()])
    findings = detector(server_storage).findings(*WINDOW)
    assert found(findings) == EXPECTED
    assert_running_without_submitted(findings)
    # the input probe ran in that pass (its scoped passes: test_detection_sql.py's
    # test_inputs_without_rows_are_left_out_with_the_same_findings)
    assert detector(server_storage, probe_inputs=False).findings(*WINDOW) == findings
    assert detector(server_storage, final_reads=True).findings(*WINDOW) == findings
    assert detector(server_storage).findings(0, WINDOW[1]) == detector(server_storage).findings(
        WINDOW[1] - 7 * 86_400_000, WINDOW[1]
    )
    skew = by(findings, "app-skewed-join", "data_skew")
    assert skew.explanation == "Largest task reads 2.00 GiB of shuffle data, 102.4× the median task (20.00 MiB)"
    assert_attributed(findings)
