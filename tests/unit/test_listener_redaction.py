"""The listener's pattern set in Python: scrubbing the relay's own text (error messages, log lines), and the one path
of a user's value (``clean``) that the collector takes again, the same as Redactor.java's."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from sparktap.listener.redaction import (
    LISTENER_MASK,
    PATTERNS_FILE,
    SCAN_SLACK_CHARS,
    clean,
    clean_name,
    clean_text,
    is_clean,
    mask,
    parse_patterns,
    patterns,
    scrub_text,
    truncate,
)
from sparktap.schemas.types import NAME, NAME_MAX_CHARS, TEXT, TEXT_MAX_CHARS, TRUNCATION_MARKER

CASES_FILE = Path(__file__).resolve().parents[1] / "java" / "redaction_cases.tsv"


def _cases() -> list[tuple[str, str]]:
    """tests/java/redaction_cases.tsv, the canaries the JUnit RedactorTest checks against the Java listener."""
    out = []
    for line in CASES_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            text, expected = (part.replace("<MASK>", "***") for part in line.split("\t"))
            out.append((text, text if expected == "=" else expected))
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("connect to sasl_ssl://alice:hunter2@broker:9093 failed", "connect to sasl_ssl://***@broker:9093 failed"),
        ("jdbc:postgresql://u:p@db:5432/x and s3a://AK:SK@b/k", "jdbc:postgresql://***@db:5432/x and s3a://***@b/k"),
        ("sasl.password=hunter2 rest", "sasl.password=*** rest"),
        ('token: "abc def" rest', "token: *** rest"),
        ("no secrets here: host:9092", "no secrets here: host:9092"),
        ("mailto:someone@example.com", "mailto:someone@example.com"),
    ],
)
def test_scrub_text(text: str, expected: str) -> None:
    assert scrub_text(text) == expected


@pytest.mark.parametrize(("text", "expected"), _cases())
def test_shared_canaries_are_masked_as_the_listener_masks_them(text: str, expected: str) -> None:
    assert mask(text) == expected


def test_the_relay_loads_the_listeners_pattern_file() -> None:
    assert PATTERNS_FILE.name == "redaction-patterns.txt" and PATTERNS_FILE.parent.name == "listener"
    assert [p.url for p in patterns()] == [True, True] + [False] * 8
    assert len(_cases()) == 32


def test_without_secrets_only_url_credentials_are_masked() -> None:
    text = "s3a://AK:wJal/K7MD@bucket token=T1"
    assert mask(text, secrets=False) == "s3a://***@bucket token=T1"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("# c\nurl (a\n", "redaction-patterns.txt line 2: missing ), unterminated subpattern at position 0"),
        ("word x(y)\n", 'redaction-patterns.txt line 1: expected "url <regex>" or "secret <regex>"'),
        ("secret abc\n", "redaction-patterns.txt line 1: the regex has no group"),
        ("# only a comment\n", "redaction-patterns.txt holds no pattern"),
    ],
)
def test_a_bad_pattern_file_names_the_line(text: str, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_patterns(text)
    assert str(raised.value) == error


def test_scrub_text_truncates() -> None:
    assert scrub_text("x" * 600, max_chars=10) == "x" * 10 + "…"


# ---------------------------------------------------------------------------------------------- the one path


def _java_constant(name: str) -> str:
    source = (PATTERNS_FILE.parent / "Redactor.java").read_text(encoding="utf-8")
    found = re.search(rf"static final (?:int|String) {name} = (.+);", source)
    assert found is not None, name
    return found.group(1).strip('"')


def test_the_caps_and_the_marker_are_the_listeners() -> None:
    assert int(_java_constant("NAME_MAX_CHARS")) == NAME_MAX_CHARS == NAME.max_chars == 256
    assert int(_java_constant("TEXT_MAX_CHARS")) == TEXT_MAX_CHARS == TEXT.max_chars == 2000
    assert int(_java_constant("SCAN_SLACK_CHARS")) == SCAN_SLACK_CHARS
    assert _java_constant("TRUNCATED_PREFIX") + "{}" + _java_constant("TRUNCATED_SUFFIX") == TRUNCATION_MARKER
    assert _java_constant("MASK") == LISTENER_MASK


def test_an_over_long_name_keeps_its_start_and_counts_what_it_left_out() -> None:
    # the room kept for the marker is the marker of the whole length: 256 - len("…[truncated 100000 chars]") = 231
    assert clean_name("u" * 100_000) == "u" * 231 + "…[truncated 99769 chars]"
    assert clean_name("u" * 1_048_576) == "u" * 230 + "…[truncated 1048346 chars]"
    assert clean_name("u" * 256) == "u" * 256
    assert clean_text("t" * 2001) == "t" * 1977 + "…[truncated 24 chars]"
    assert truncate("abcdef", 3) == "…[t"  # a cap shorter than the marker: only in tests


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("password=hunter2", "password=*********(redacted)"),
        ("alice", "alice"),
        ("ali\x1b]0;evil\x07ce\r\n\t\x85", "ali]0;evilce"),  # ESC, BEL, CR, LF, tab and C1 NEL: all removed
        # line/paragraph separators, a right-to-left override and an isolate (CVE-2021-42574): removed too
        ("orders\u2028DROP\u2029\u202egpj.exe\u2066x\u2069", "ordersDROPgpj.exex"),
        ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", LISTENER_MASK),
    ],
)
def test_a_name_is_masked_and_loses_every_control_character(value: str, expected: str) -> None:
    assert clean_name(value) == expected
    assert is_clean(expected, NAME) and clean_name(expected) == expected


def test_free_text_keeps_tab_and_newline_only() -> None:
    assert clean_text("SELECT a,\tb\r\nFROM t\x1b[2J\x00") == "SELECT a,\tb\nFROM t[2J"
    assert clean_text("a\u2028b\u202dc\u2067d") == "abcd"


def test_a_secret_straddling_the_cut_is_masked_before_the_cut() -> None:
    value = "x" * 200 + " password=hunter2hunter2hunter2 " + "y" * 100_000  # the cut falls inside the secret
    assert clean_name(value) == "x" * 200 + " password=*********(redacted) y…[truncated 99999 chars]"


def test_cleaning_is_idempotent_on_every_canary() -> None:
    for text, _ in _cases():
        once = clean(text, TEXT)
        assert clean(once, TEXT) == once and is_clean(once, TEXT), text


def test_the_work_per_value_is_bounded() -> None:
    """A 1 MB value built to make the name=value pattern backtrack (quadratic over the whole value) costs no more
    than its window."""
    hostile = "password" * 131_072
    start = time.perf_counter()
    out = clean_name(hostile)
    assert time.perf_counter() - start < 2.0
    assert out.endswith("…[truncated 1048346 chars]")


def test_the_relay_loads_the_patterns_without_the_contracts_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay runs on the driver host with the listener's few dependencies: no pydantic (schemas' models)."""
    import importlib
    import sys

    for name in [m for m in sys.modules if m.startswith(("sparktap.schemas", "sparktap.listener.redaction"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic", None)  # an import of it fails
    module = importlib.import_module("sparktap.listener.redaction")
    assert module.mask("token=t0k") == "token=***" and module.scrub_text("x" * 600, 10) == "x" * 10 + "…"
    assert "sparktap.schemas" not in sys.modules
