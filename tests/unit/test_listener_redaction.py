"""Scrubbing of the text the relay writes itself (error messages, log lines)."""

from __future__ import annotations

import pytest

from sparktap.listener.redaction import scrub_text


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


def test_scrub_text_truncates() -> None:
    assert scrub_text("x" * 600, max_chars=10) == "x" * 10 + "…"
