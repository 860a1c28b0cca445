"""The runbook (``docs/runbook.md``): one entry per alert, rendered from the rules' own runbook text.

``python -m sparktap.detection.runbook docs/runbook.md`` rewrites the file; a unit test checks it is up to date.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from sparktap.detection.registry import RULES
from sparktap.detection.rule import Rule

INTRO = """\
# sparktap runbook

One entry per alert. Every sparktap alert (Grafana-managed rule `sparktap: <rule>` or a message of the built-in
`sparktap alert`) names the cluster, the application (name, id, attempt) and the stage attempt (or the SQL execution
and AQE shuffle-read or plan node, or the streaming query), carries the evidence numbers, a one-line explanation and
a suggested fix. Open the **sparktap / Application** dashboard from the message (or with `var-cluster` / `var-app`):
its *Findings* table has the numbers, *Stage timeline*, *Task duration distribution per stage*, *Skew per stage*,
*Shuffle read: local vs remote*, *Spills per stage*, the AQE tables, *Plan: estimated vs actual rows* and *Codegen
coverage* show the context; streaming findings have the **sparktap / Streaming** dashboard.

Thresholds below are the defaults (each rule's module in `detection/rules/`); override them per rule with
`SPARKTAP_ALERTS__THRESHOLDS__<RULE>__<NAME>` (the alerter and `sparktap grafana export/deploy` both read them).
Severity: `info` is shown on dashboards only; `warning` and `critical` are notified (`SPARKTAP_ALERTS__MIN_SEVERITY`).

**Who gets it, and muting it.** Which channels a finding reaches, how often it is repeated and whom it mentions
follow the routing file (`SPARKTAP_ALERTS__ROUTING_PATH`; docs/dashboards.md, "Alert routing and silences"). A
finding you know about and cannot fix today: `sparktap silence add --rule <rule> --app-name '<glob>' --for 24h
--reason "…"` (every alerter replica honours it; the *Active silences* table on the Overview dashboard lists it;
`sparktap silence expire ID` ends it early, and the finding is then sent at the next pass if it is still open). A
route or silence that "does nothing": check the names with `sparktap alerts check-routes FILE` and
`sparktap silence list`; `team` matches the finding's team or one of its job tags, `app_name` is a case-sensitive
glob.

**Time lost.** Every finding's evidence carries `time_lost_ms`, the rule's estimate of the wall time the problem
cost (defined per rule below). Findings are listed by it, largest first (`sparktap findings`, chat, the *Findings*
table). Each rule has two floors, `MIN_TIME_LOST_MS` (no finding under it) and `CRITICAL_MIN_TIME_LOST_MS` (a
critical finding under it is reported as a warning). A stage's median task is its baseline only from 5 tasks up;
below that the rules use the mean task (the balanced time) or stay silent.
"""


def index(rules: Sequence[Rule] = RULES) -> dict[str, str]:
    """Runbook anchor -> rule id, one per alert."""
    return {rule.anchor: rule.id for rule in rules}


def render(rules: Sequence[Rule] = RULES) -> str:
    """The whole runbook: the introduction, then one ``## <title>`` entry per rule."""
    entries = [f"## {rule.title}\n\n{rule.runbook.strip()}\n{_time_lost(rule)}" for rule in rules]
    return "\n".join([INTRO, *entries])


def _time_lost(rule: Rule) -> str:
    if not rule.time_lost:
        return ""
    config = rule.config()
    low, high = (getattr(config, n, 0) for n in ("min_time_lost_ms", "critical_min_time_lost_ms"))
    floors = f" Floors: a finding from {low / 1000:g} s, critical from {high / 1000:g} s." if high else ""
    return f"\n**Time lost** (`time_lost_ms`): {rule.time_lost}.{floors}\n"


def main(argv: Sequence[str] = sys.argv[1:]) -> None:
    """Write the runbook to the path given (default: stdout)."""
    text = render()
    if argv:
        Path(argv[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
