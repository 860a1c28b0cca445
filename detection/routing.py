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
``team``: equal to the finding's ``team`` or one of its ``job_tags``; ``severity``: equal (info, warning,
critical). A channel reached through two routes gets one message, repeated after the shorter ``renotify``.

Without a routing file — or without a ``default`` in it — the channels of the single-list settings
(``SPARKTAP_ALERTS__SLACK_WEBHOOK_URL`` …, named ``slack``, ``teams``, ``webhook``) are the default route, repeated
after ``SPARKTAP_ALERTS__RENOTIFY_SECONDS``: existing configurations keep working unchanged.

``load_routing`` checks the whole file and raises one ``RoutingError`` listing every problem, one line each, with
its path in the file (``routes[2].match.severity: …``); ``Router.build`` then reads the secrets (a missing
environment variable or unreadable file is an error at start, naming the variable or file, never the URL).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import SecretStr

from sparktap.detection.notify import (
    Channel,
    NotifyError,
    WebhookChannel,
    slack_payload,
    teams_payload,
    webhook_payload,
)
from sparktap.detection.query import RULES_BY_ID
from sparktap.detection.thresholds import SEVERITIES
from sparktap.errors import SparktapError

CHANNEL_TYPES: dict[str, Callable[..., dict[str, Any]]] = {
    "slack": slack_payload,
    "teams": teams_payload,
    "webhook": webhook_payload,
}
LEGACY_CHANNELS = ("slack", "teams", "webhook")
"""Names of the single-list settings' channels: reserved, a routing file cannot define them."""
MATCH_KEYS = ("cluster", "app_name", "team", "user", "rule", "severity")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$")
"""Characters a regular expression reads as operators, in Python's ``re`` and in RE2 alike: escaped when literal."""


class RoutingError(SparktapError):
    """The routing file cannot be used: one line per problem, each with its path in the file."""


def shown(value: Any, limit: int = 40) -> str:
    """A value for a message: as given when short, else its start and end around '…' (a 400-digit number is
    not repeated to the user whole)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[: limit - 10]}…{text[-6:]}"


def parse_duration(text: Any) -> float:
    """'90s', '30m', '4h', '1d', '1w' (or a number of seconds) -> seconds; ValueError otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool) and 0 < text < math.inf:
        return float(text)
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{shown(text)!r} is not a duration: expected a number and a unit s, m, h, d or w, e.g. 4h")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"{shown(text)!r} is too long a duration: the number is too large")
    return seconds


# ----------------------------------------------------------------------------------------------- globs


def glob_regex(glob: str) -> str:
    """The one glob language of routes, silences and their export to Grafana, as a regular expression matching a
    whole value (the same text for Python's ``re`` here and RE2 in Grafana): ``*`` any run of characters, ``?`` one,
    ``[abc]``/``[a-z]`` one of a class, ``[!…]`` one not in it; every other character is itself. ValueError (one
    clear reason) for what the two engines would read differently: an unclosed ``[``, an empty class, a class that
    starts with ``^`` or ``]`` or holds a ``[`` (POSIX classes in RE2), a reversed range."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                raise ValueError(f"{glob!r}: '[' at position {i + 1} is never closed by ']'")
            body = glob[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            if not body:
                raise ValueError(f"{glob!r}: an empty class [] at position {i + 1}")
            if body[0] in "^]" or "[" in body or any(pair in body for pair in ("--", "&&", "||", "~~")):
                raise ValueError(
                    f"{glob!r}: the class at position {i + 1} starts with '^' or ']', or holds '[' or a doubled "
                    "-, &, | or ~ (read differently by Grafana's RE2); write [!…] to negate a class"
                )
            cls = "[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]"
            try:
                re.compile(cls)
            except re.error as exc:
                raise ValueError(f"{glob!r}: the class at position {i + 1} is not valid: {exc.msg}") from exc
            out.append(cls)
            i = end
        elif c == "]":
            raise ValueError(f"{glob!r}: ']' at position {i + 1} closes no '['")
        else:
            out.append("\\" + c if c in _REGEX_SPECIAL else c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _glob_pattern(glob: str) -> re.Pattern[str]:
    return re.compile(glob_regex(glob))


def glob_matches(value: str, glob: str) -> bool:
    """Whether ``value`` matches ``glob`` as a whole (``glob_regex``; an invalid glob matches nothing)."""
    try:
        pattern = _glob_pattern(glob)
    except ValueError:
        return False
    return pattern.fullmatch(value) is not None


def glob_matches_everything(glob: str) -> bool:
    """A glob of wildcards only, with a ``*`` (``*``, ``**``, ``?*``, ``*?*``): it matches every application name
    (names are never empty; ``?*`` misses only the empty one)."""
    return "*" in glob and set(glob) <= {"*", "?"}


def format_duration(seconds: float) -> str:
    """Seconds as Grafana writes durations: '1h', '90m', '45s'."""
    whole = int(seconds)
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{max(whole, 1)}s"


# ----------------------------------------------------------------------------------------------- the model


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


def finding_attrs(finding: Any) -> dict[str, Any]:
    """What routes and silences match on. ``team``, ``user``, ``job_tags`` are '' / () on findings without
    attribution."""
    return {
        "cluster": str(finding.cluster),
        "app_name": str(finding.app_name),
        "rule": str(finding.rule),
        "severity": str(finding.severity),
        "team": str(getattr(finding, "team", "") or ""),
        "user": str(getattr(finding, "user", "") or ""),
        "job_tags": tuple(str(t) for t in (getattr(finding, "job_tags", None) or ())),
    }


# ----------------------------------------------------------------------------------------------- loading


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def strings(self, where: str, value: Any) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, str | int) or isinstance(item, bool) or str(item) == "":
                self.add(
                    f"{where}[{i}]" if isinstance(value, list) else where, f"expected a non-empty string, got {item!r}"
                )
            else:
                out.append(str(item))
        return tuple(out)

    def unknown(self, where: str, data: Mapping[str, Any], known: Sequence[str]) -> None:
        for key in data:
            if key not in known:
                self.add(f"{where}.{key}" if where else str(key), f"unknown key; expected one of {', '.join(known)}")


def _channel(ck: _Checker, name: Any, data: Any) -> ChannelSpec | None:
    where = f"channels.{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        ck.add(where, "a channel name is letters, digits, '_', '.', '-' (up to 63), starting with a letter or digit")
        return None
    if name in LEGACY_CHANNELS:
        ck.add(where, f"the names {', '.join(LEGACY_CHANNELS)} are the SPARKTAP_ALERTS__* channels'; choose another")
        return None
    if not isinstance(data, dict):
        ck.add(where, "expected a mapping with type and url_env or url_file")
        return None
    ck.unknown(where, data, ("type", "url_env", "url_file", "url"))
    if "url" in data:
        ck.add(
            f"{where}.url",
            "webhook URLs are secrets and never go in this file: put the URL in an environment "
            "variable (url_env: NAME) or a mounted secret file (url_file: /path)",
        )
    kind = data.get("type")
    if kind not in CHANNEL_TYPES:
        ck.add(f"{where}.type", f"{kind!r} is not a channel type; expected one of {', '.join(CHANNEL_TYPES)}")
    env, file = data.get("url_env"), data.get("url_file")
    if (env is None) == (file is None):
        ck.add(where, "give exactly one of url_env (an environment variable) or url_file (a secret file)")
    elif env is not None and not (isinstance(env, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", env)):
        ck.add(f"{where}.url_env", f"{env!r} is not an environment variable name")
    elif file is not None and not (isinstance(file, str) and file.startswith("/")):
        ck.add(f"{where}.url_file", f"{file!r}: expected an absolute path")
    if kind not in CHANNEL_TYPES:
        return None
    return ChannelSpec(name, str(kind), str(env or ""), str(file or ""))


def _route(
    ck: _Checker, where: str, data: Any, channels: Mapping[str, Any], handles: Mapping[str, str], default: bool
) -> Route | None:
    if not isinstance(data, dict):
        ck.add(where, "expected a mapping with name, match, channels")
        return None
    known = (
        ("channels", "renotify", "mention")
        if default
        else ("name", "match", "channels", "renotify", "continue", "mention")
    )
    ck.unknown(where, data, known)
    name = "default" if default else data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        ck.add(f"{where}.name", "every route needs a name: letters, digits, '_', '.', '-' (up to 63)")
        name = ""
    if name:
        where = f'{where} (name="{name}")' if not default else where
    listed = data.get("channels")
    names = ck.strings(f"{where}.channels", listed) if listed is not None else ()
    if not names:
        ck.add(f"{where}.channels", "a route sends to at least one channel")
    for i, ch in enumerate(names):
        if ch not in channels:
            ck.add(f"{where}.channels[{i}]", f'no channel named "{ch}" under channels:')
    renotify = None
    if "renotify" in data:
        try:
            renotify = parse_duration(data["renotify"])
        except ValueError as exc:
            ck.add(f"{where}.renotify", str(exc))
    mention = data.get("mention")
    mention_user, users = False, cast(tuple[str, ...], ())
    if mention == "user":
        mention_user = True
    elif mention is not None:
        users = ck.strings(f"{where}.mention", mention)
        for i, user in enumerate(users):
            if user not in handles:
                ck.add(f"{where}.mention[{i}]", f'user "{user}" has no handle under handles: (or write mention: user)')
    match = Match()
    raw = data.get("match", {}) if not default else {}
    if not isinstance(raw, dict):
        ck.add(f"{where}.match", "expected a mapping of " + ", ".join(MATCH_KEYS))
    else:
        ck.unknown(f"{where}.match", raw, MATCH_KEYS)
        values = {k: ck.strings(f"{where}.match.{k}", v) for k, v in raw.items() if k in MATCH_KEYS}
        for sev in values.get("severity", ()):
            if sev not in SEVERITIES:
                ck.add(f"{where}.match.severity", f"{sev!r} is not a severity; expected {', '.join(SEVERITIES)}")
                break
        for rule in values.get("rule", ()):
            if rule not in RULES_BY_ID:
                ck.add(f"{where}.match.rule", f'no detection rule "{rule}" (see docs/runbook.md for the rule ids)')
        for glob in values.get("app_name", ()):
            try:
                glob_regex(glob)
            except ValueError as exc:
                ck.add(f"{where}.match.app_name", str(exc))
        match = Match(**values)
    cont = data.get("continue", False)
    if not isinstance(cont, bool):
        ck.add(f"{where}.continue", f"expected true or false, got {cont!r}")
    return Route(name or "?", names, renotify, match, bool(cont), users, mention_user)


def parse_routing(data: Any, path: str = "") -> Routing:
    """A routing document (parsed YAML) -> ``Routing``; RoutingError listing every problem."""
    ck = _Checker()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RoutingError(f'routing file path="{path}": expected a mapping with channels, handles, routes, default')
    ck.unknown("", data, ("channels", "handles", "routes", "default"))
    channels: dict[str, ChannelSpec] = {}
    raw_channels = data.get("channels") or {}
    if not isinstance(raw_channels, dict):
        ck.add("channels", "expected a mapping of channel name -> {type, url_env | url_file}")
        raw_channels = {}
    for name, spec in raw_channels.items():
        parsed = _channel(ck, name, spec)
        if parsed is not None:
            channels[parsed.name] = parsed
    handles: dict[str, str] = {}
    raw_handles = data.get("handles") or {}
    if not isinstance(raw_handles, dict):
        ck.add("handles", "expected a mapping of user -> chat handle")
        raw_handles = {}
    for user, handle in raw_handles.items():
        if not isinstance(handle, str) or not handle.strip():
            ck.add(f"handles.{user}", f"expected a handle string, got {handle!r}")
        else:
            handles[str(user)] = handle.strip()
    known_channels = {**{n: 1 for n in raw_channels if isinstance(n, str)}}
    routes: list[Route] = []
    raw_routes = data.get("routes") or []
    if not isinstance(raw_routes, list):
        ck.add("routes", "expected a list of routes")
        raw_routes = []
    seen: set[str] = set()
    for i, item in enumerate(raw_routes):
        route = _route(ck, f"routes[{i}]", item, known_channels, handles, default=False)
        if route is None:
            continue
        if route.name in seen and route.name != "?":
            ck.add(f"routes[{i}].name", f'"{route.name}" is the name of an earlier route; names are unique')
        seen.add(route.name)
        routes.append(route)
    default = None
    if data.get("default") is not None:
        default = _route(ck, "default", data["default"], known_channels, handles, default=True)
    if ck.problems:
        lines = "\n".join(f"  {p}" for p in ck.problems)
        raise RoutingError(f'routing file path="{path}": {len(ck.problems)} problem(s); fix them:\n{lines}')
    return Routing(channels, handles, tuple(routes), default, path)


MAX_ROUTING_CHARS = 1_000_000


def _refuse_aliases(text: str, path: str | Path) -> None:
    """RoutingError at the first YAML alias (``*name``): a few lines of nested aliases expand to billions of nodes
    (the "billion laughs"), and a routing file never needs them. Parsing events does not expand them: linear."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            raise RoutingError(
                f'routing file path="{path}" uses a YAML alias *{event.anchor} at line {mark.line + 1}, column '
                f"{mark.column + 1}: aliases are refused (a small file could expand without bound); write the "
                "values out in full"
            )


def load_routing(path: str | Path) -> Routing:
    """Read and check a routing file (RoutingError: unreadable, not YAML, or every problem one line each)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RoutingError(
            f'cannot read routing file path="{path}": {exc.strerror}; check SPARKTAP_ALERTS__ROUTING_PATH'
        ) from exc
    if len(text) > MAX_ROUTING_CHARS:
        raise RoutingError(
            f'routing file path="{path}" has {len(text)} characters: at most {MAX_ROUTING_CHARS} are read; '
            "a routing file is a few routes and channels"
        )
    try:
        _refuse_aliases(text, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise RoutingError(f'routing file path="{path}" is not valid YAML{at}: {problem}') from exc
    return parse_routing(data, str(path))


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
        attrs = finding_attrs(finding)
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
