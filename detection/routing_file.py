"""The routing file (issue 38): pydantic models of the YAML document, its JSON Schema for editors
(``sparktap alerts schema``; the checked-in ``docs/routing.schema.json``), and ``load_routing``.

The models check the shape (unknown keys refused, types, names, severities, rule ids, globs, durations); the
references between parts (a route's channels and mentioned users exist, route names are unique, a channel does not
take a reserved name) are checked after, on whatever parts are well formed, so one run names every problem: one line
each, with its path in the file (``routes[0] (name="a").match.colour: unknown key; …``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError, field_validator

from sparktap.detection.globs import glob_regex, parse_duration
from sparktap.detection.query import RULES_BY_ID
from sparktap.detection.routing_spec import (
    LEGACY_CHANNELS,
    ChannelSpec,
    Match,
    Route,
    Routing,
    RoutingError,
)
from sparktap.detection.teams import TeamRule
from sparktap.detection.thresholds import SEVERITIES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
NAME_RULE = "letters, digits, '_', '.', '-' (up to 63), starting with a letter or digit"
MAX_ROUTING_CHARS = 1_000_000


def _listed(value: Any) -> Any:
    """One value or a list of them; YAML numbers are names too (``cluster: 42``)."""
    items = value if isinstance(value, list) else [value]
    return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in items]


Text = Annotated[str, Field(min_length=1)]
Strings = Annotated[tuple[Text, ...], BeforeValidator(_listed, json_schema_input_type=Text | list[Text])]
Severity = Literal["info", "warning", "critical"]


def _severities(value: Any) -> Any:
    listed = _listed(value)
    for sev in listed:
        if sev not in SEVERITIES:
            raise ValueError(f"{sev!r} is not a severity; expected {', '.join(SEVERITIES)}")
    return listed


Severities = Annotated[
    tuple[Severity, ...], BeforeValidator(_severities, json_schema_input_type=Severity | list[Severity])
]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Duration = Annotated[str | float, Field(description="'90s', '30m', '4h', '1d', '1w', or seconds")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelFile(_Model):
    """A named channel: its type and where its secret URL is (never the URL itself)."""

    type: Literal["slack", "teams", "webhook"]
    url_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = Field(
        default=None, description="environment variable holding the URL"
    )
    url_file: Annotated[str, Field(pattern=r"^/")] | None = Field(
        default=None, description="absolute path of a (secret) file holding the URL"
    )


class MatchFile(_Model):
    """Every key given must match; a key's list is any-of; a key left out matches everything."""

    cluster: Strings = ()
    app_name: Strings = Field(default=(), description="shell globs: *, ?, [abc], [!abc]; case-sensitive")
    team: Strings = Field(default=(), description="the finding's owning team (the team mapping), or a trusted tag")
    user: Strings = ()
    rule: Strings = ()
    severity: Severities = ()

    @field_validator("rule")
    @classmethod
    def _rules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for rule in value:
            if rule not in RULES_BY_ID:
                raise ValueError(f'no detection rule "{rule}" (see docs/runbook.md for the rule ids)')
        return value

    @field_validator("app_name")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            glob_regex(glob)
        return value


class DefaultFile(_Model):
    """What no route took."""

    channels: Annotated[
        tuple[Text, ...],
        Field(min_length=1),
        BeforeValidator(_listed, json_schema_input_type=Text | Annotated[list[Text], Field(min_length=1)]),
    ]
    renotify: Duration | None = None
    mention: Strings | None = Field(
        default=None, description="user: the finding's user (through handles); or a list of users"
    )

    @field_validator("renotify")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is not None:
            parse_duration(value)
        return value


class RouteFile(DefaultFile):
    """A route: tried in order, the first that matches takes the finding (``continue: true``: later ones too)."""

    name: Name
    match: MatchFile = MatchFile()
    continue_: StrictBool = Field(default=False, alias="continue")


class RoutingFile(_Model):
    """The routing file (``SPARKTAP_ALERTS__ROUTING_PATH``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="sparktap routing file")

    channels: dict[Annotated[str, Field(pattern=NAME_PATTERN)], ChannelFile] = {}
    handles: dict[str, Annotated[str, Field(pattern=r"\S")]] = Field(default={}, description="user -> chat handle")
    routes: list[RouteFile] = []
    default: DefaultFile | None = None
    teams: list[TeamRule] | None = Field(
        default=None, description="the team mapping: first rule that matches owns the finding (docs/security.md)"
    )


def routing_schema() -> dict[str, Any]:
    """The JSON Schema of the routing file, for editors (``# yaml-language-server: $schema=…``)."""
    schema = RoutingFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def routing_schema_text() -> str:
    return json.dumps(routing_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------------------------- problems


def _where(loc: tuple[Any, ...], data: Any) -> str:
    """A pydantic location as a path in the file: ``routes[0] (name="a").match.colour``; the names pydantic gives
    the members of a union and validator functions (``function-before[…]``, ``str``) are left out."""
    out, node = "", data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            name = node.get("name") if isinstance(node, dict) and out.startswith("routes[") else None
            if out.count("[") == 1 and isinstance(name, str) and re.match(NAME_PATTERN, name):
                out += f' (name="{name}")'
        elif isinstance(node, dict) and part in node:
            out += f".{part}" if out else str(part)
            node = node[part]
        elif not re.search(r"[\[(]", str(part)) and str(part) not in ("str", "float", "int", "bool"):
            out += f".{part}" if out else str(part)
            node = None
    return out


def _unwrap(tp: Any) -> Any:
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, UnionType):
            tp = next((a for a in get_args(tp) if a is not type(None)), tp)
        else:
            return tp


def _known_keys(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys the model at ``loc``'s parent takes (for an unknown key's message)."""
    tp: Any = RoutingFile
    for part in loc[:-1]:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or n: f for n, f in tp.model_fields.items()}
            if part not in fields:
                return ()
            tp = fields[part].annotation
        elif get_origin(tp) in (list, tuple, dict):
            tp = get_args(tp)[-1 if get_origin(tp) is dict else 0]
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tuple(f.alias or n for n, f in tp.model_fields.items())
    return ()


_URL_IN_FILE = (
    "webhook URLs are secrets and never go in this file: put the URL in an environment variable (url_env: NAME) or "
    "a mounted secret file (url_file: /path)"
)


def _message(error: Mapping[str, Any]) -> str:
    kind, ctx, loc = error["type"], error.get("ctx") or {}, tuple(error["loc"])
    if kind == "extra_forbidden" and loc[0] == "channels" and loc[-1] == "url":
        return _URL_IN_FILE
    if kind == "extra_forbidden":
        return f"unknown key; expected one of {', '.join(_known_keys(loc))}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if loc[-1] == "name" and kind in ("string_pattern_mismatch", "missing", "string_type"):
        return f"every route needs a name: {NAME_RULE}"
    if loc[-1] == "[key]":
        return f"{error['input']!r}: a channel name is {NAME_RULE}"
    if kind == "too_short" and loc[-1] == "channels":
        return "a route sends to at least one channel"
    if kind == "bool_type":
        return f"expected true or false, got {error['input']!r}"
    if kind == "literal_error" and loc[-1] == "type":
        return f"{error['input']!r} is not a channel type; expected one of slack, teams, webhook"
    if kind == "literal_error":
        return f"{error['input']!r} is not one of {ctx.get('expected')}"
    if kind == "string_pattern_mismatch":
        return f"{error['input']!r} does not match {ctx.get('pattern')}"
    if kind == "missing":
        return "required"
    return f"{error['msg']}, got {error['input']!r}"


def _problems(exc: ValidationError, data: Any) -> list[str]:
    out: list[str] = []
    for error in exc.errors(include_url=False):
        line = f"{_where(tuple(error['loc']), data) or '(top)'}: {_message(error)}"
        if line not in out:
            out.append(line)
    return out


def _document_order(problem: str) -> str:
    """A problem's path, numbers padded: problems listed part by part (``routes[2]`` before ``routes[10]``)."""
    where = problem.split(": ", 1)[0].split(" (name=")[0]
    return re.sub(r"\d+", lambda m: m.group().zfill(6), where)


def _references(data: Mapping[str, Any]) -> list[str]:
    """What the models cannot see: channels and handles a route names exist, unique names, reserved names."""
    out: list[str] = []
    channels: dict[Any, Any] = data["channels"] if isinstance(data.get("channels"), dict) else {}
    handles: dict[Any, Any] = data["handles"] if isinstance(data.get("handles"), dict) else {}
    for name, spec in channels.items():
        if name in LEGACY_CHANNELS:
            out.append(
                f"channels.{name}: the names {', '.join(LEGACY_CHANNELS)} are the SPARKTAP_ALERTS__* channels'; "
                "choose another"
            )
        if isinstance(spec, dict) and ("url_env" in spec) == ("url_file" in spec):
            out.append(
                f"channels.{name}: give exactly one of url_env (an environment variable) or url_file (a secret file)"
            )
    routes: list[Any] = data["routes"] if isinstance(data.get("routes"), list) else []
    named = [(f"routes[{i}]", r) for i, r in enumerate(routes)]
    seen: set[str] = set()
    for where, route in [*named, ("default", data.get("default"))]:
        if not isinstance(route, dict):
            continue
        name = route.get("name")
        if where != "default" and isinstance(name, str) and re.match(NAME_PATTERN, name):
            if name in seen:
                out.append(f'{where}.name: "{name}" is the name of an earlier route; names are unique')
            seen.add(name)
            where = f'{where} (name="{name}")'
        listed = route.get("channels")
        for i, ch in enumerate(listed if isinstance(listed, list) else [listed] if listed else []):
            if isinstance(ch, str) and ch not in channels:
                out.append(f'{where}.channels[{i}]: no channel named "{ch}" under channels:')
        mention = route.get("mention")
        if mention is not None and _listed(mention) != ["user"]:
            for i, user in enumerate(_listed(mention)):
                if isinstance(user, str) and user not in handles:
                    out.append(
                        f'{where}.mention[{i}]: user "{user}" has no handle under handles: (or write mention: user)'
                    )
    return out


# ----------------------------------------------------------------------------------------------- loading


def _route(spec: DefaultFile, name: str) -> Route:
    mention_user = spec.mention == ("user",)
    users = () if spec.mention is None or mention_user else tuple(spec.mention)
    renotify = parse_duration(spec.renotify) if spec.renotify is not None else None
    if isinstance(spec, RouteFile):
        match = Match(**spec.match.model_dump())
        return Route(name, spec.channels, renotify, match, spec.continue_, users, mention_user)
    return Route(name, spec.channels, renotify, Match(), False, users, mention_user)


def parse_routing(data: Any, path: str = "") -> Routing:
    """A routing document (parsed YAML) -> ``Routing``; RoutingError listing every problem, one line each."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise RoutingError(f'routing file path="{path}": expected a mapping with channels, handles, routes, default')
    problems: list[str] = []
    model = None
    try:
        model = RoutingFile.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc, data)
    problems += _references(data)
    problems.sort(key=_document_order)
    if problems or model is None:
        lines = "\n".join(f"  {p}" for p in problems)
        raise RoutingError(f'routing file path="{path}": {len(problems)} problem(s); fix them:\n{lines}')
    channels = {
        name: ChannelSpec(name, spec.type, spec.url_env or "", spec.url_file or "")
        for name, spec in model.channels.items()
    }
    handles = {user: handle.strip() for user, handle in model.handles.items()}
    routes = tuple(_route(r, r.name) for r in model.routes)
    default = _route(model.default, "default") if model.default is not None else None
    teams = tuple(model.teams) if model.teams is not None else None
    return Routing(channels, handles, routes, default, path, teams)


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
