"""The Grafana side of routing: contact points and notification policies exported from the routing file mirror it
route for route and validate against the Grafana contract (HTTP API definitions ``EmbeddedContactPoint``, ``Route``;
the file-provisioning layout); silences become ``postableSilence`` bodies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from click.testing import CliRunner

from sparktap.cli import cli
from sparktap.dashboards.alerts import LABEL_COLUMNS
from sparktap.dashboards.routing_export import (
    glob_regex,
    routing_integrations,
    routing_policy,
    silence_body,
)
from sparktap.detection.routing import load_routing
from sparktap.detection.silences import Silence
from tests.fixtures.grafana import load_spec
from tests.support.routing_samples import ROUTES

SPEC = load_spec()
CONTRACTS = Path(__file__).resolve().parents[3] / "shared" / "contracts" / "grafana"
GO_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w))+$")


def _validate(definition: str, value: Any) -> list[str]:
    schema = {"$ref": f"#/definitions/{definition}", "definitions": SPEC["definitions"]}
    return [
        f"{list(e.absolute_path)}: {e.message[:200]}" for e in jsonschema.Draft4Validator(schema).iter_errors(value)
    ]


def _routing(tmp_path: Path) -> Any:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    return load_routing(path)


def test_contact_points_and_policies_mirror_the_routing_file(tmp_path: Path) -> None:
    routing = _routing(tmp_path)
    policy = routing_policy(routing)
    assert _validate("Route", policy) == []
    assert policy["receiver"] == "sparktap-route-default" and policy["repeat_interval"] == "2h"
    assert policy["object_matchers"] == [["source", "=", "sparktap"]]
    # route for route, in the file's order, with continue and the route's renotify as repeat_interval
    assert [(r["receiver"], r["continue"], r["repeat_interval"]) for r in policy["routes"]] == [
        ("sparktap-route-prod-critical", True, "1h"),
        ("sparktap-route-nightly", False, "4h"),
        ("sparktap-route-team-x", False, "4h"),
        ("sparktap-route-alice", False, "4h"),
    ]
    assert [r["object_matchers"] for r in policy["routes"]] == [
        [["cluster", "=", "prod-eu"], ["severity", "=", "critical"]],
        [["app_name", "=~", "nightly-.*|batch-."]],
        [["team", "=", "team-x"]],
        [["user", "=", "alice"], ["rule", "=~", "data_skew|gc_pressure"]],
    ]
    points = routing_integrations(routing)
    for point in points:
        assert _validate("EmbeddedContactPoint", point) == []
    by_point: dict[str, list[tuple[str, str]]] = {}
    for p in points:
        by_point.setdefault(p["name"], []).append((p["type"], p["settings"]["url"]))
    # each route's contact point has one integration per channel it names; URLs are references, never values
    assert by_point == {
        "sparktap-route-prod-critical": [("webhook", "$T_PAGER"), ("slack", "$T_ONCALL")],
        "sparktap-route-nightly": [("teams", "$__file{/run/secrets/data}"), ("slack", "$T_ONCALL")],
        "sparktap-route-team-x": [("teams", "$__file{/run/secrets/data}")],
        "sparktap-route-alice": [("webhook", "$T_ALICE")],
        "sparktap-route-default": [("webhook", "$T_PAGER")],
    }
    assert len({p["uid"] for p in points}) == len(points) and all(len(p["uid"]) <= 40 for p in points)
    # every label a policy matches on is a label of every sparktap alert (the alert query's label columns)
    assert {m[0] for r in policy["routes"] for m in r["object_matchers"]} <= set(LABEL_COLUMNS)
    # every receiver a policy names is a contact point
    assert {policy["receiver"], *(r["receiver"] for r in policy["routes"])} == set(by_point)


def test_export_writes_the_routing_file_as_provisioning(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["grafana", "export", str(out), "--routing", str(path)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((out / "alerting" / "sparktap.yaml").read_text())
    upstream = yaml.safe_load((CONTRACTS / "provisioning-examples/upstream-contact_points.multiple.yml").read_text())
    for point in doc["contactPoints"]:
        assert set(upstream["contactPoints"][0]) <= set(point) <= {"orgId", "name", "receivers"}
        for receiver in point["receivers"]:
            assert set(receiver) <= {"uid", "type", "settings", "disableResolveMessage"}
    assert [p["name"] for p in doc["contactPoints"]] == [
        "sparktap-route-prod-critical",
        "sparktap-route-nightly",
        "sparktap-route-team-x",
        "sparktap-route-alice",
        "sparktap-route-default",
    ]
    (tree,) = doc["policies"]
    assert tree["receiver"] == "sparktap-route-default"
    (subtree,) = tree["routes"]
    assert _validate("Route", {k: v for k, v in tree.items() if k != "orgId"}) == []
    assert len(subtree["routes"]) == 4 and all(GO_DURATION.match(r["repeat_interval"]) for r in subtree["routes"])


def test_globs_become_anchored_re2_and_silences_postable_bodies() -> None:
    cases = {"nightly-*": "nightly-.*", "etl.v?": r"etl\.v.", "a[!0-9]b": "a[^0-9]b", "x(1)+": r"x\(1\)\+"}
    for glob, regex in cases.items():
        assert glob_regex(glob) == regex
    pattern = re.compile(glob_regex("nightly-[ab]*.py"))
    assert pattern.fullmatch("nightly-a1.py") and not pattern.fullmatch("nightly-c1.py")
    silence = Silence(
        "abc123",
        "data_skew",
        "nightly-*",
        "prod-eu",
        "",
        "bob",
        1_795_000_000_000,
        1_795_086_400_500,
        1_795_000_000_000,
        "ops",
        "known skew",
    )
    body = silence_body(silence)
    assert _validate("postableSilence", body) == []
    assert body["matchers"] == [
        {"name": "source", "value": "sparktap", "isRegex": False, "isEqual": True},
        {"name": "rule", "value": "data_skew", "isRegex": False, "isEqual": True},
        {"name": "cluster", "value": "prod-eu", "isRegex": False, "isEqual": True},
        {"name": "user", "value": "bob", "isRegex": False, "isEqual": True},
        {"name": "app_name", "value": "nightly-.*", "isRegex": True, "isEqual": True},
    ]
    assert body["startsAt"] == "2026-11-18T11:06:40.000Z" and body["endsAt"] == "2026-11-19T11:06:40.500Z"
    assert body["comment"] == "known skew (sparktap silence abc123)" and body["createdBy"] == "ops"
