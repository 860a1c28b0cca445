"""Silences' guards (``detection/silences.py``) and the CLI's text tables (``detection/findings.py``) against hostile
input (issue 41 items 9 and 10); the same against real ClickHouse and the CLI in
tests/integration/test_silences_hostile.py."""

from __future__ import annotations

import pwd
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sparktap.detection.findings import terminal_text, text_table
from sparktap.detection.silences import MAX_SILENCE_SECONDS, SilenceError, SilenceStore, identity, os_user

ME = pwd.getpwuid(__import__("os").getuid()).pw_name


def store() -> tuple[SilenceStore, list[Mapping[str, Any]]]:
    written: list[Mapping[str, Any]] = []

    def insert(table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        written.extend(rows)
        return len(rows)

    return SilenceStore(lambda sql: [], insert, "db", lambda: 1_000.0), written


@pytest.mark.parametrize("glob", ["*", "**", "?*", "*?*", "???*"])
def test_a_glob_that_matches_every_name_needs_all(glob: str) -> None:
    silences, written = store()
    with pytest.raises(SilenceError) as caught:
        silences.add(app_name=glob, cluster="prod-eu", team="payments", reason="noise")
    assert str(caught.value) == (
        f'a silence needs --rule or an --app-name glob that does not match every name (app_name="{glob}" matches '
        "every name): it would hide every alert; narrow it, or add --all to silence everything on purpose"
    )
    assert written == []
    made = silences.add(app_name=glob, reason="maintenance window", everything=True, duration="1h")
    assert (made.app_name, made.ends_at_ms - made.starts_at_ms) == (glob, 3_600_000) and len(written) == 1


def test_a_narrow_glob_or_a_rule_is_enough() -> None:
    silences, written = store()
    assert silences.add(app_name="nightly-*", reason="r").app_name == "nightly-*"
    assert silences.add(rule="data_skew", app_name="*", reason="r").rule == "data_skew"
    with pytest.raises(SilenceError, match="needs --rule or an --app-name glob"):
        silences.add(reason="r")
    assert len(written) == 2


def test_the_author_is_the_os_account_with_a_name_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "mallory")
    monkeypatch.setenv("LOGNAME", "mallory")
    assert os_user() == ME != "mallory"
    assert identity() == ME and identity(ME) == ME
    assert identity("  alice\n ") == f"{ME} (as alice)"
    assert identity("root) (as root") == f"{ME} (as root) (as root)"  # the account always comes first
    silences, written = store()
    assert silences.add(rule="data_skew", reason="r", author="alice").created_by == f"{ME} (as alice)"
    assert written[0]["created_by"] == f"{ME} (as alice)"


@pytest.mark.parametrize("duration", ["367d", "53w", MAX_SILENCE_SECONDS + 1, "9" * 400 + "s"])
def test_a_silence_lasts_at_most_a_year(duration: str | float) -> None:
    silences, written = store()
    with pytest.raises(SilenceError, match=r"^--for .*(longer than a silence may last \(366d\)|too long a duration)"):
        silences.add(rule="data_skew", reason="r", duration=duration)
    assert written == []


def test_text_tables_show_control_characters_as_escapes() -> None:
    user = "bob\x1b]0;owned\x07\r\nrule  critical  forged"
    text = text_table([("app", user, "note\x9b2J\u202eevil"), ("b", "ok", "-")], ("application", "who", "finding"))
    shown_user = "bob\\x1b]0;owned\\x07\\x0d\\x0arule  critical  forged"
    assert len(shown_user) == 49
    assert text.splitlines() == [
        "application  " + "who".ljust(49) + "  finding",
        "-----------  " + "-" * 49 + "  " + "-" * len("note\\x9b2J\\u202eevil"),
        "app          " + shown_user + "  note\\x9b2J\\u202eevil",
        "b            " + "ok".ljust(49) + "  -",
    ]
    assert terminal_text("tab\there\x7f") == "tab\\x09here\\x7f"
    assert terminal_text("naïve — ünïcode ✓") == "naïve — ünïcode ✓"  # printable text is untouched
