"""Scrubbing of the text the relay writes itself (error messages, log lines), with the listener's pattern set."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktap.listener.redaction import PATTERNS_FILE, mask, parse_patterns, patterns, scrub_text

CASES_FILE = Path(__file__).resolve().parents[1] / "java" / "redaction_cases.tsv"


def _cases() -> list[tuple[str, str]]:
    """tests/java/redaction_cases.tsv, the canaries the JUnit RedactorTest checks against the Java listener."""
    out = []
    for line in CASES_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            text, expected = line.split("\t")
            out.append((text, text if expected == "=" else expected.replace("<MASK>", "***")))
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
    assert [p.url for p in patterns()] == [True, True, False, False, False, False, False, False]
    assert len(_cases()) == 23


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
