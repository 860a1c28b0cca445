"""Adding a rule is adding one file: a throwaway rule module in a temporary package (named in
``SPARKTAP_RULE_PACKAGES``) shows in the findings on chDB, in Grafana's alert rules and in the runbook.

The registry reads the packages once per process, so the check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparktap.detection.registry import RULE_IDS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

RULE_FILE = '''
"""Throwaway: a stage ran many tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import Group, Rule, RuleSql
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class ManyTasks(Group):
    min_tasks: int = 5_000


def sql(t: Thresholds) -> list[RuleSql]:
    c = t.throwaway_many_tasks
    return [RuleSql(
        rule="throwaway_many_tasks", source="stage", condition=f"tasks >= {lit(c.min_tasks)}",
        severity="'warning'", value="tasks", threshold=lit(c.min_tasks), evidence=(("tasks", "tasks"),),
        explanation="concat('the stage ran ', toString(tasks), ' tasks')", fix="'run fewer tasks'",
    )]


def condition(t: Thresholds) -> str:
    return f"a stage ran >= {t.throwaway_many_tasks.min_tasks} tasks"


RULE = Rule(id="throwaway_many_tasks", order=1_000, title="Throwaway many tasks", summary="a stage ran many tasks",
            config=ManyTasks, sql=sql, condition=condition, runbook="**Fires when** a stage ran many tasks.")
'''

PROBE = """
import json, sys
from pathlib import Path

from sparktap.store import StorageTarget, open_storage
from sparktap.dashboards.alerts import rule_group_file
from sparktap.detection import Detector
from sparktap.detection.runbook import index, render
from sparktap.schemas.rows import RowBuilder
from tests.support import detection_samples as samples
from tests.support import sample_app

storage = open_storage(StorageTarget(kind="chdb", path=Path(sys.argv[1]), database="newrule"))
try:
    storage.ensure_schema()
    builder = RowBuilder(storage.version())
    for app in (samples.tiny_tasks(), samples.balanced()):
        for table, rows in builder.group(e.model_dump(mode="json") for e in app.events).items():
            storage.insert(table, rows)
    t0 = sample_app.BASE_TIME_MS
    detector = Detector(storage.query, database=storage.database, version=storage.version())
    findings = detector.findings(t0 - 6 * 3_600_000, t0 + 3_600_000)
finally:
    storage.close()
rules = {r["title"]: r["annotations"]["description"] for r in rule_group_file()["rules"]}
print(json.dumps({
    "findings": sorted([f.app_id, f.stage_id, f.rule, f.severity, f.explanation, f.value]
                       for f in findings if f.rule == "throwaway_many_tasks"),
    "alert": rules.get("sparktap: Throwaway many tasks"),
    "alerts": len(rules),
    "runbook": index(),
    "entry": "## Throwaway many tasks\\n\\n**Fires when** a stage ran many tasks.\\n" in render(),
}))
"""


def test_a_rule_added_as_one_file_shows_everywhere(tmp_path: Path) -> None:
    package = tmp_path / "pkg" / "throwaway_rules"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "many_tasks.py").write_text(textwrap.dedent(RULE_FILE))
    env = {
        **os.environ,
        "SPARKTAP_RULE_PACKAGES": "throwaway_rules",
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), str(ROOT)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "chdb")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["findings"] == [
        ["app-tiny-tasks", 1, "throwaway_many_tasks", "warning", "the stage ran 6000 tasks", 6000.0]
    ]
    assert out["alerts"] == len(RULE_IDS) + 1  # every built-in rule, and the one added
    assert out["alert"].startswith("A stage ran many tasks: a stage ran >= 5000 tasks.")
    assert out["runbook"]["throwaway-many-tasks"] == "throwaway_many_tasks"
    assert list(out["runbook"].values())[:-1] == list(RULE_IDS)  # the built-in rules first, in their order
    assert out["entry"] is True
