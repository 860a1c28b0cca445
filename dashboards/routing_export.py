"""Grafana contact points, notification policies and silences from the alerter's routing file and silences, so
that Grafana alerting and the built-in alerter route alike (``detection/routing.py``, ``detection/silences.py``).

Route for route:

- each route (and ``default``) becomes one contact point, ``sparktap-route-<name>`` (``sparktap-route-default``),
  with one integration per channel it names (Slack, Teams, webhook): a Grafana route has one receiver, a contact
  point holds several integrations;
- the sparktap policy subtree (``source=sparktap``) sends to the default route's contact point and has one child
  policy per route, in the file's order, with ``continue`` as in the file and ``repeat_interval`` = the route's
  ``renotify``. Matchers: ``cluster``, ``rule``, ``severity``, ``user``, ``team`` on the alert labels of the same
  names (``=`` for one value, ``=~`` for several), ``app_name`` globs as ``=~`` regular expressions (RE2, anchored by
  Grafana) made by ``routing.glob_regex``, the same function the alerter matches with: one glob language, so a glob
  means the same names here and there, and one that the two engines would read differently is refused by both.

``sparktap grafana deploy --routing FILE`` sends the same over the HTTP API (``routing_contact_points``: the URLs
read from the variables / files; ``deploy.py``). Secrets stay out of the files: a channel's ``url_env: NAME`` is
written ``$NAME`` and its ``url_file: /path`` ``$__file{/path}``, both expanded by Grafana when it reads the
provisioning file (give Grafana the same variables or mount the same secret files).

What does not map: ``team`` matching one of the finding's ``job_tags`` (Grafana matches the ``team`` label only);
mentions (``mention:`` / ``handles:``); the alerter's resolve messages follow Grafana's own resolve instead.

Silences (``silence_bodies``) become Alertmanager ``postableSilence`` bodies for Grafana's
``POST /api/alertmanager/grafana/api/v2/silences`` (Grafana cannot provision silences from files): ``rule``,
``cluster``, ``team``, ``user`` equal matchers, ``app_name`` a regex matcher, ``startsAt``/``endsAt`` the same
times, ``comment`` the reason, ``createdBy`` the author. Grafana assigns its own ids; expiring one there is a
``DELETE …/silence/{id}``; a silence's ``team`` does not reach ``job_tags`` there either.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sparktap.dashboards.builders import Json
from sparktap.dashboards.contact_points import GROUP_BY, _settings
from sparktap.dashboards.defaults import ALERT_SOURCE_LABEL
from sparktap.detection.routing import ChannelSpec, Match, Route, Routing, format_duration, glob_regex
from sparktap.detection.silences import Silence

DEFAULT_RENOTIFY_SECONDS = 4 * 3600.0
_RE2_SPECIAL = set("\\.+*?()|[]{}^$")


ROUTE_PREFIX = "sparktap-route-"


def contact_point_name(route: Route) -> str:
    return f"{ROUTE_PREFIX}{route.name}"


def _uid(route: str, channel: str) -> str:
    """A stable integration uid (Grafana allows 40 characters)."""
    digest = hashlib.sha1(f"{route}\0{channel}".encode(), usedforsecurity=False).hexdigest()[:12]
    return f"sparktap-{digest}"


def url_reference(spec: ChannelSpec) -> str:
    """How a provisioning file names the secret: an environment variable or a file Grafana reads."""
    return f"${spec.url_env}" if spec.url_env else f"$__file{{{spec.url_file}}}"


def _routes(routing: Routing) -> list[Route]:
    return [*routing.routes, *([routing.default] if routing.default else [])]


def routing_integrations(routing: Routing, urls: Mapping[str, str] | None = None) -> list[Json]:
    """Every (contact point, integration) of the routing file as ``EmbeddedContactPoint`` bodies: with ``urls``
    (channel -> URL, for the HTTP API) the URLs, else references Grafana expands (for provisioning files)."""
    out: list[Json] = []
    for route in _routes(routing):
        for name in route.channels:
            spec = routing.channels[name]
            out.append(
                {
                    "uid": _uid(route.name, name),
                    "name": contact_point_name(route),
                    "type": spec.type,
                    "settings": _settings(spec.type, urls[name] if urls is not None else url_reference(spec)),
                    "disableResolveMessage": False,
                }
            )
    return out


def routing_contact_points(routing: Routing) -> list[Json]:
    """The HTTP API bodies with the URLs read now (each channel's environment variable or file, as the alerter
    reads them: RoutingError naming the one missing, never a URL)."""
    from sparktap.detection.routing import RoutingError

    urls, problems = {}, []
    for name, spec in routing.channels.items():
        try:
            urls[name] = spec.secret().get_secret_value()
        except RoutingError as exc:
            problems.append(str(exc))
    if problems:
        raise RoutingError(
            f'routing file path="{routing.path}": cannot deploy its contact points:\n'
            + "\n".join(f"  {p}" for p in problems)
        )
    return routing_integrations(routing, urls)


def routing_contact_points_file(routing: Routing) -> list[Json]:
    """The ``contactPoints`` of an alerting provisioning file: one per route."""
    by_name: dict[str, list[Json]] = {}
    for item in routing_integrations(routing):
        by_name.setdefault(item["name"], []).append(
            {k: item[k] for k in ("uid", "type", "settings", "disableResolveMessage")}
        )
    return [{"orgId": 1, "name": name, "receivers": receivers} for name, receivers in by_name.items()]


def _literal(value: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


def matchers(match: Match) -> list[list[str]]:
    """``object_matchers`` of a route's ``match``."""
    out: list[list[str]] = []
    for label in ("cluster", "team", "user", "rule", "severity"):
        values: Sequence[str] = getattr(match, label)
        if len(values) == 1:
            out.append([label, "=", values[0]])
        elif values:
            out.append([label, "=~", "|".join(_literal(v) for v in values)])
    if match.app_name:
        out.append(["app_name", "=~", "|".join(glob_regex(g) for g in match.app_name)])
    return out


def routing_policy(routing: Routing, default_renotify_seconds: float = DEFAULT_RENOTIFY_SECONDS) -> Json:
    """The sparktap policy subtree (``source=sparktap``), one child per route, the default route at its root."""
    if routing.default is None:
        raise ValueError(f'routing file path="{routing.path}" has no default: route; Grafana needs a receiver')

    def every(route: Route) -> str:
        return format_duration(route.renotify_seconds or default_renotify_seconds)

    children = [
        {
            "receiver": contact_point_name(route),
            "object_matchers": matchers(route.match),
            "continue": route.continue_,
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": every(route),
        }
        for route in routing.routes
    ]
    return {
        "receiver": contact_point_name(routing.default),
        "object_matchers": [[ALERT_SOURCE_LABEL[0], "=", ALERT_SOURCE_LABEL[1]]],
        "group_by": GROUP_BY,
        "continue": False,
        "repeat_interval": every(routing.default),
        "routes": children,
    }


def routing_policy_tree_file(routing: Routing, default_renotify_seconds: float = DEFAULT_RENOTIFY_SECONDS) -> Json:
    """A whole policy tree for file provisioning: the root sends to the default route's contact point."""
    subtree = routing_policy(routing, default_renotify_seconds)
    return {
        "orgId": 1,
        "receiver": subtree["receiver"],
        "group_by": ["grafana_folder", "alertname"],
        "routes": [subtree],
    }


def _rfc3339(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def silence_body(silence: Silence) -> Json:
    """A silence as Grafana's Alertmanager ``postableSilence``."""
    found: list[dict[str, Any]] = [
        {"name": label, "value": value, "isRegex": False, "isEqual": True}
        for label in ("rule", "cluster", "team", "user")
        if (value := getattr(silence, label))
    ]
    if silence.app_name:
        found.append({"name": "app_name", "value": glob_regex(silence.app_name), "isRegex": True, "isEqual": True})
    return {
        "matchers": [
            {"name": ALERT_SOURCE_LABEL[0], "value": ALERT_SOURCE_LABEL[1], "isRegex": False, "isEqual": True},
            *found,
        ],
        "startsAt": _rfc3339(silence.starts_at_ms),
        "endsAt": _rfc3339(silence.ends_at_ms),
        "createdBy": silence.created_by or "sparktap",
        "comment": f"{silence.reason} (sparktap silence {silence.id})",
    }


def silence_bodies(silences: Sequence[Silence]) -> list[Json]:
    return [silence_body(s) for s in silences]
