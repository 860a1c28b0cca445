"""Hostile input to the routing file and the glob language (issue 41 item 12): a YAML alias bomb is refused fast,
and routes, silences and the Grafana export accept exactly the same globs, meaning the same names."""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest

from sparktap.dashboards.routing_export import silence_body
from sparktap.detection.routing import (
    Match,
    RoutingError,
    glob_matches,
    glob_matches_everything,
    glob_regex,
    load_routing,
    parse_duration,
    parse_routing,
)
from sparktap.detection.silences import Silence, SilenceError, SilenceStore

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"{chr(ord('b') + i)}: &{chr(ord('b') + i)} [{','.join(['*' + chr(ord('a') + i)] * 9)}]" for i in range(8)),
        "handles: {bob: *i}",
    ]
)


def test_a_billion_laughs_routing_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(BILLION_LAUGHS)
    tracemalloc.start()
    started = time.monotonic()
    with pytest.raises(RoutingError) as caught:
        load_routing(path)
    took = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(caught.value) == (
        f'routing file path="{path}" uses a YAML alias *a at line 2, column 8: aliases are refused (a small file '
        "could expand without bound); write the values out in full"
    )
    assert took < 1.0 and peak < 5_000_000  # 9**9 strings when expanded; nothing is expanded


def test_a_routing_file_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("# " + "x" * 1_000_000)
    with pytest.raises(RoutingError, match=r"has 1000002 characters: at most 1000000 are read"):
        load_routing(path)


# glob -> the names it must match and must not; None: refused by every consumer
GLOBS: dict[str, tuple[list[str], list[str]] | None] = {
    "nightly-*": (["nightly-", "nightly-etl"], ["Nightly-etl", "xnightly-etl"]),
    "etl.v?": (["etl.v2"], ["etlxv2", "etl.v22"]),
    "a[!0-9]b": (["axb"], ["a1b", "ab"]),
    "a[0-9]b": (["a1b"], ["axb"]),
    "x(1)+{2}|$^": (["x(1)+{2}|$^"], ["x11"]),
    "app-[a-c]ail-?": (["app-bail-1"], ["app-fail-1"]),
    "back\\slash*": (["back\\slash"], ["backslash"]),
    "c[-a]d": (["c-d", "cad"], ["cbd"]),
    "app-[^x]ail-1": None,  # RE2 negates, fnmatch read '^' literally: refused
    "a[]b]": None,
    "a[[:alpha:]]": None,
    "a[z-a]": None,
    "a[": None,
    "a]b": None,
    "a[]": None,
    "a[!]": None,
    "a[b--c]": None,
}


@pytest.mark.parametrize("glob", list(GLOBS))
def test_routes_silences_and_grafana_accept_the_same_globs_with_the_same_meaning(glob: str) -> None:
    expected = GLOBS[glob]
    doc = {
        "channels": {"c": {"type": "webhook", "url_env": "X"}},
        "routes": [{"name": "r", "match": {"app_name": glob}, "channels": ["c"]}],
    }
    store = SilenceStore(lambda sql: [], lambda table, rows: len(rows), "db", lambda: 1.0)
    silence = Silence("s1", "", glob, "", "", "", 0, 1, 0, "me", "r")
    if expected is None:
        with pytest.raises(ValueError, match=re.escape(repr(glob))):
            glob_regex(glob)
        with pytest.raises(RoutingError, match=re.escape('routes[0] (name="r").match.app_name: ' + repr(glob))):
            parse_routing(doc)
        with pytest.raises(SilenceError, match=re.escape("--app-name " + repr(glob))):
            store.add(app_name=glob, rule="data_skew", reason="r")
        with pytest.raises(ValueError, match=re.escape(repr(glob))):
            silence_body(silence)
        assert not glob_matches("app-fail-1", glob)
        return
    matching, other = expected
    (route,) = parse_routing(doc).routes
    grafana = re.compile(next(m for m in silence_body(silence)["matchers"] if m["name"] == "app_name")["value"])
    for name in [*matching, *other]:
        want = name in matching
        assert glob_matches(name, glob) is want, name
        assert route.match.matches({"app_name": name}) is want, name
        assert (
            silence.matches({"rule": "", "app_name": name, "cluster": "", "team": "", "user": "", "job_tags": ()})
            is want
        )
        assert (grafana.fullmatch(name) is not None) is want, name  # anchored, as Grafana anchors it


def test_match_all_globs() -> None:
    assert [
        g for g in ("*", "**", "?*", "*?*", "??*", "?", "a*", "*a", "[a-z]*", "") if glob_matches_everything(g)
    ] == [
        "*",
        "**",
        "?*",
        "*?*",
        "??*",
    ]
    assert Match(app_name=("*",)).matches({"app_name": "anything"})


@pytest.mark.parametrize("text", ["9" * 400 + "s", "1" + "0" * 320 + "w"])
def test_a_duration_too_large_for_a_float_is_one_error(text: str) -> None:
    with pytest.raises(ValueError, match="is too long a duration: the number is too large"):
        parse_duration(text)
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(float("inf"))
