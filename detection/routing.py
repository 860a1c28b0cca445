"""Alert routing: which findings go to which channels, how often they are repeated, and whom they mention.

One YAML file (``SPARKTAP_ALERTS__ROUTING_PATH``; the Helm value ``alerts.routing`` mounts it from a ConfigMap)::

    channels:                         # named channels; the URL is a secret, referenced, never written here
      oncall-slack: {type: slack, url_env: ONCALL_SLACK_URL}            # an environment variable …
      data-teams:   {type: teams, url_file: /etc/sparktap/secrets/data-teams}   # … or a (secret) file
      pager:        {type: webhook, url_env: PAGER_URL}
    handles:                          # user -> chat handle, for mentions
      alice: "<@U024BE7LH>"
    routes:                           # in order; the first route that matches takes the finding
      - name: critical-prod
        match: {cluster: [prod-eu], severity: [critical]}
        channels: [oncall-slack, pager]
        renotify: 1h
        continue: true                # … and later routes are tried too (Alertmanager's ``continue``)
      - name: nightly
        match: {app_name: "nightly-*", team: data-eng}
        channels: [data-teams]
        mention: user                 # the finding's user, through ``handles`` (or a list of users)
    default:                          # what no route took
      channels: [oncall-slack]
      renotify: 4h

Semantics are Alertmanager's: routes are tried in order, the first that matches takes the finding and the search
stops there unless that route says ``continue: true``; a finding no route took goes to ``default``. Within a
``match``, every key given must match (AND); a key's list is any-of (OR); a key left out matches everything.
``cluster``, ``rule``, ``user``: equal; ``app_name``: a shell glob (``*``, ``?``, ``[…]``; case-sensitive);
``team``: equal to the finding's owning team (``teams:``, the team mapping of ``teams.py``) or a job tag the
mapping trusts; ``severity``: equal (info, warning,
critical). A channel reached through two routes gets one message, repeated after the shorter ``renotify``.

Without a routing file — or without a ``default`` in it — the channels of the single-list settings
(``SPARKTAP_ALERTS__SLACK_WEBHOOK_URL`` …, named ``slack``, ``teams``, ``webhook``) are the default route, repeated
after ``SPARKTAP_ALERTS__RENOTIFY_SECONDS``: existing configurations keep working unchanged.

``load_routing`` (``routing_file.py``: pydantic models, a JSON Schema for editors) checks the whole file and
raises one ``RoutingError`` listing every problem, one line each, with its path in the file
(``routes[2].match.severity: …``); ``Router.build`` then reads the secrets (a missing environment variable or
unreadable file is an error at start, naming the variable or file, never the URL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparktap.detection.globs import (
    format_duration,
    glob_matches,
    glob_matches_everything,
    glob_regex,
    parse_duration,
    shown,
)
from sparktap.detection.notify import Channel
from sparktap.detection.routing_file import load_routing, parse_routing, routing_schema, routing_schema_text
from sparktap.detection.routing_spec import (
    CHANNEL_TYPES,
    LEGACY_CHANNELS,
    MATCH_KEYS,
    ChannelSpec,
    Match,
    Route,
    Routing,
    RoutingError,
)
from sparktap.detection.teams import TeamRules, owner

__all__ = [
    "CHANNEL_TYPES",
    "LEGACY_CHANNELS",
    "MATCH_KEYS",
    "ChannelSpec",
    "Match",
    "Route",
    "Router",
    "Routing",
    "RoutingError",
    "Target",
    "finding_attrs",
    "format_duration",
    "glob_matches",
    "glob_matches_everything",
    "glob_regex",
    "load_routing",
    "parse_duration",
    "parse_routing",
    "routing_schema",
    "routing_schema_text",
    "shown",
]


def finding_attrs(finding: Any, teams: TeamRules | None = None) -> dict[str, Any]:
    """What routes and silences match on. ``team``, ``user``, ``job_tags`` are '' / () on findings without
    attribution. With a team mapping (``teams``), ``team`` is the owner it gives and ``job_tags`` only the tags it
    trusts there; the finding's own tags are kept in ``tag_team`` and ``tags`` (shown, never matched)."""
    attrs: dict[str, Any] = {
        "cluster": str(finding.cluster),
        "app_name": str(finding.app_name),
        "rule": str(finding.rule),
        "severity": str(finding.severity),
        "team": str(getattr(finding, "team", "") or ""),
        "user": str(getattr(finding, "user", "") or ""),
        "job_tags": tuple(str(t) for t in (getattr(finding, "job_tags", None) or ())),
    }
    if teams is not None:
        team, trusted = owner(
            teams, attrs["cluster"], attrs["user"], attrs["app_name"], attrs["team"], attrs["job_tags"]
        )
        attrs.update(tag_team=attrs["team"], tags=attrs["job_tags"], team=team, job_tags=trusted)
    return attrs


# ----------------------------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class Target:
    """One channel a finding goes to: how soon it is repeated there, and whom the message mentions."""

    channel: Channel
    renotify_seconds: float
    mention: str = ""
    route: str = ""


class Router:
    """Finds each finding's channels (``targets``) following a ``Routing``; ``channels`` are all of them."""

    def __init__(
        self,
        routing: Routing,
        channels: Mapping[str, Channel],
        renotify_seconds: float,
        legacy: Sequence[Channel] = (),
    ) -> None:
        self.routing = routing
        self.renotify_seconds = renotify_seconds
        self.by_name: dict[str, Channel] = {**channels, **{c.name: c for c in legacy}}
        default = routing.default
        if default is None and legacy:
            default = Route("default", tuple(c.name for c in legacy))
        self.teams = routing.teams
        self.default = default

    @classmethod
    def build(
        cls, routing: Routing | None, legacy: Sequence[Channel], renotify_seconds: float, timeout: float = 10.0
    ) -> Router:
        """Read every channel's secret (RoutingError when one is missing) and route; without a routing file, the
        legacy channels are the default route."""
        routing = routing or Routing()
        problems, channels = [], {}
        for name, spec in routing.channels.items():
            try:
                channels[name] = spec.channel(timeout)
            except RoutingError as exc:
                problems.append(str(exc))
        if problems:
            raise RoutingError(
                f'routing file path="{routing.path}": {len(problems)} channel(s) cannot be used:\n'
                + "\n".join(f"  {p}" for p in problems)
            )
        return cls(routing, channels, renotify_seconds, legacy)

    @property
    def channels(self) -> list[Channel]:
        used = {n for r in (*self.routing.routes, *([self.default] if self.default else [])) for n in r.channels}
        return [c for n, c in self.by_name.items() if n in used]

    def routes_for(self, attrs: Mapping[str, Any]) -> list[Route]:
        """The routes a finding takes: Alertmanager's first match, later ones too after ``continue: true``;
        ``default`` when none matched."""
        out: list[Route] = []
        for route in self.routing.routes:
            if route.match.matches(attrs):
                out.append(route)
                if not route.continue_:
                    break
        if not out and self.default is not None:
            out.append(self.default)
        return out

    def mention(self, route: Route, attrs: Mapping[str, Any]) -> str:
        handles = self.routing.handles
        users = [attrs["user"]] if route.mention_user and attrs["user"] else []
        users += [u for u in route.mention if u not in users]
        return " ".join(handles[u] for u in users if u in handles)

    def targets(self, finding: Any) -> list[Target]:
        """The channels of a finding, each once (the shortest re-notify of the routes reaching it)."""
        attrs = finding_attrs(finding, self.teams)
        out: dict[str, Target] = {}
        for route in self.routes_for(attrs):
            renotify = route.renotify_seconds or self.renotify_seconds
            mention = self.mention(route, attrs)
            for name in route.channels:
                had = out.get(name)
                if had is None or renotify < had.renotify_seconds:
                    out[name] = Target(
                        self.by_name[name], renotify, mention or (had.mention if had else ""), route.name
                    )
        return list(out.values())
