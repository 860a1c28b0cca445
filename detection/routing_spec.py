"""The checked routing file as the alerter uses it: named channels (their secret URL read at start), routes with
their ``Match``, handles and the team mapping. ``routing_file`` reads a YAML file into a ``Routing``; ``routing``
routes findings with it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sparktap.detection.globs import glob_matches
from sparktap.detection.notify import NotifyError, WebhookChannel, slack_payload, teams_payload, webhook_payload
from sparktap.detection.teams import TeamRules
from sparktap.errors import SparktapError

CHANNEL_TYPES: dict[str, Callable[..., dict[str, Any]]] = {
    "slack": slack_payload,
    "teams": teams_payload,
    "webhook": webhook_payload,
}
LEGACY_CHANNELS = ("slack", "teams", "webhook")
"""Names of the single-list settings' channels: reserved, a routing file cannot define them."""
MATCH_KEYS = ("cluster", "app_name", "team", "user", "rule", "severity")


class RoutingError(SparktapError):
    """The routing file cannot be used: one line per problem, each with its path in the file."""


@dataclass(frozen=True)
class ChannelSpec:
    """A named channel of the routing file: its type and where its secret URL is (an env variable or a file)."""

    name: str
    type: str
    url_env: str = ""
    url_file: str = ""

    def secret(self) -> SecretStr:
        """The URL, read now; RoutingError naming the variable or file (never the URL) when it is not there."""
        if self.url_env:
            value = os.environ.get(self.url_env, "").strip()
            if not value:
                raise RoutingError(
                    f'channel "{self.name}": environment variable {self.url_env} is not set; set it to the '
                    f"{self.type} webhook URL (from a Kubernetes secret) or use url_file"
                )
            return SecretStr(value)
        try:
            value = Path(self.url_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise RoutingError(
                f'channel "{self.name}": cannot read url_file="{self.url_file}": {exc.strerror}; mount the secret '
                "there or fix the path"
            ) from exc
        if not value:
            raise RoutingError(f'channel "{self.name}": url_file="{self.url_file}" is empty; put the webhook URL in it')
        return SecretStr(value)

    def channel(self, timeout: float) -> WebhookChannel:
        try:
            return WebhookChannel(self.name, self.secret(), CHANNEL_TYPES[self.type], timeout)
        except NotifyError as exc:
            source = f"environment variable {self.url_env}" if self.url_env else f'url_file="{self.url_file}"'
            raise RoutingError(f'channel "{self.name}": its URL ({source}) must be http(s)') from exc


@dataclass(frozen=True)
class Match:
    """What a route takes; an empty tuple matches everything."""

    cluster: tuple[str, ...] = ()
    app_name: tuple[str, ...] = ()
    team: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    rule: tuple[str, ...] = ()
    severity: tuple[str, ...] = ()

    def matches(self, attrs: Mapping[str, Any]) -> bool:
        """``attrs``: ``finding_attrs`` of a finding (cluster, app_name, team, job_tags, user, rule, severity)."""
        if self.cluster and attrs["cluster"] not in self.cluster:
            return False
        if self.app_name and not any(glob_matches(attrs["app_name"], g) for g in self.app_name):
            return False
        if self.team and not ({attrs["team"], *attrs["job_tags"]} & set(self.team)):
            return False
        if self.user and attrs["user"] not in self.user:
            return False
        if self.rule and attrs["rule"] not in self.rule:
            return False
        return not (self.severity and attrs["severity"] not in self.severity)


@dataclass(frozen=True)
class Route:
    name: str
    channels: tuple[str, ...]
    renotify_seconds: float | None = None
    """None: the settings' ``renotify_seconds``"""
    match: Match = Match()
    continue_: bool = False
    mention: tuple[str, ...] = ()
    """users whose handle the message mentions; ``("user",)`` with ``mention_user``: the finding's user"""
    mention_user: bool = False


@dataclass(frozen=True)
class Routing:
    """A checked routing file (``load_routing``)."""

    channels: dict[str, ChannelSpec] = field(default_factory=dict)
    handles: dict[str, str] = field(default_factory=dict)
    routes: tuple[Route, ...] = ()
    default: Route | None = None
    path: str = ""
    teams: TeamRules | None = None
    """the team mapping (``teams.py``); None: none configured, user-set tags are trusted"""
