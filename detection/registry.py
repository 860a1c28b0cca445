"""The rule registry: every module of ``sparktap.detection.rules`` defining ``RULE``, plus those of the packages
named in the environment variable ``SPARKTAP_RULE_PACKAGES`` (comma-separated import names, read once at import).

Everything that lists rules — the thresholds model, the detection query, Grafana's alert rules and panels, the
alerter, the report and the runbook — reads ``RULES`` from here.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterable

from sparktap.detection.rule import Rule

BUILTIN_PACKAGE = "sparktap.detection.rules"
PACKAGES_ENV = "SPARKTAP_RULE_PACKAGES"


def discover(packages: Iterable[str]) -> tuple[Rule, ...]:
    """The ``RULE`` of every module of these packages, sorted by ``order`` then id; two rules may not share an id."""
    found: dict[str, Rule] = {}
    for name in packages:
        package = importlib.import_module(name)
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{name}.{info.name}")
            rule = getattr(module, "RULE", None)
            if not isinstance(rule, Rule):
                continue
            if rule.id in found:
                raise ValueError(f"detection rule id {rule.id!r} is defined twice (second in {module.__name__})")
            found[rule.id] = rule
    return tuple(sorted(found.values(), key=lambda r: (r.order, r.id)))


def packages() -> list[str]:
    extra = [p.strip() for p in os.environ.get(PACKAGES_ENV, "").split(",") if p.strip()]
    return [BUILTIN_PACKAGE, *extra]


RULES: tuple[Rule, ...] = discover(packages())
RULE_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
