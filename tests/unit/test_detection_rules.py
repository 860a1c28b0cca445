"""The rule registry: one module per rule, discovered; the runbook rendered from the rules is the checked-in one."""

from __future__ import annotations

from pathlib import Path

from sparktap.detection import RULE_IDS, Thresholds
from sparktap.detection.registry import RULES, discover
from sparktap.detection.runbook import index, render

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_of_the_rules_folder_is_one_rule() -> None:
    """The one golden list of the built-in rules and their order; every other test reads ``RULE_IDS``."""
    modules = sorted(p.stem for p in (ROOT / "detection" / "rules").glob("*.py") if p.stem != "__init__")
    assert sorted(RULE_IDS) == modules
    assert discover(["sparktap.detection.rules"]) == RULES
    assert RULE_IDS == (
        "task_time_skew",
        "data_skew",
        "skew_not_fixed",
        "small_partitions",
        "small_files",
        "table_file_growth",
        "oversized_partition",
        "shuffle_blowup",
        "shuffle_block_explosion",
        "remote_heavy_shuffle",
        "task_failures",
        "gc_pressure",
        "plan_misestimate",
        "codegen_off",
        "native_fallback",
        "streaming_saturated",
        "streaming_state_growth",
        "idle_executors",
        "memory_overprovisioned",
        "memory_pressure",
        "driver_memory_pressure",
        "run_regression",
    )


def test_each_rule_describes_itself() -> None:
    defaults = Thresholds()
    for rule in RULES:
        assert rule.title and rule.summary and "**Fires when**" in rule.runbook
        assert isinstance(getattr(defaults, rule.id), rule.config)
        assert rule.condition(defaults)
        assert {part.rule for part in rule.sql(defaults)} == {rule.id}


def test_the_checked_in_runbook_is_rendered_from_the_rules() -> None:
    text = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    assert text == render(), "docs/runbook.md is stale: python -m sparktap.detection.runbook docs/runbook.md"
    assert list(index().values()) == list(RULE_IDS)
