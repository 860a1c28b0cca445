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
"""


def index(rules: Sequence[Rule] = RULES) -> dict[str, str]:
    """Runbook anchor -> rule id, one per alert."""
    return {rule.anchor: rule.id for rule in rules}


def render(rules: Sequence[Rule] = RULES) -> str:
    """The whole runbook: the introduction, then one ``## <title>`` entry per rule."""
    entries = [f"## {rule.title}\n\n{rule.runbook.strip()}\n" for rule in rules]
    return "\n".join([INTRO, *entries])


def main(argv: Sequence[str] = sys.argv[1:]) -> None:
    """Write the runbook to the path given (default: stdout)."""
    text = render()
    if argv:
        Path(argv[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
