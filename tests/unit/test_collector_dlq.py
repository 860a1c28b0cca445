"""Dead-letter records: where a message came from, truncation, reasons."""

from __future__ import annotations

from sparktap.collector.kafka.dlq import (
    HEADER_ERROR,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_TIMESTAMP,
    HEADER_TOPIC,
    HEADER_TRUNCATED,
    DeadLetter,
    one_line,
)
from tests.support.collector_messages import message


def test_dead_letter_keeps_the_message_and_says_where_it_came_from() -> None:
    letter = DeadLetter.of(message(2, 41, b"{oops"), "not_json", "not JSON: unexpected character\nat line 1")
    assert (letter.key, letter.value) == (b"app-1", b"{oops")
    headers = dict(letter.headers)
    assert headers["trace"] == b"abc"  # the original headers travel along
    assert headers[HEADER_TOPIC] == b"events"
    assert headers[HEADER_PARTITION] == b"2"
    assert headers[HEADER_OFFSET] == b"41"
    assert headers[HEADER_TIMESTAMP] == b"1795000000123"
    assert headers[HEADER_ERROR] == b"not_json"
    assert headers[HEADER_REASON] == b"not JSON: unexpected character at line 1"


def test_dead_letter_truncation_and_reason_length() -> None:
    letter = DeadLetter.of(message(0, 1, b"x" * 5000), "too_large", "message too large")
    small = letter.shrunk(100)
    assert small.value == b"x" * 100 and small.truncated
    assert dict(small.headers)[HEADER_TRUNCATED] == b"5000"
    assert len(one_line("y" * 5000)) == 1000


def test_a_dead_letter_refused_again_sheds_the_message_headers() -> None:
    """The message's own headers can fill the topic's limit: the last resort keeps only ours and 1 KiB of value,
    so a dead letter never holds the batch forever. A header named like ours but sent by the producer is not ours."""
    msg = message(0, 7, b"v" * 5000)
    msg.set_headers([("big", b"h" * 900_000), (HEADER_REASON, b"spoofed" * 1000)])
    letter = DeadLetter.of(msg, "not_json", "not JSON: unexpected character")
    last = letter.smaller(100)
    assert last is not None and last.truncated and not last.stripped
    last = last.smaller(100)
    assert last is not None and last.stripped
    headers = dict(last.headers)
    assert last.value == b"v" * 100
    assert headers[HEADER_REASON] == b"not JSON: unexpected character" and "big" not in headers
    assert headers[HEADER_TRUNCATED] == b"5000" and headers["sparktap.headers_dropped"] == b"2"
    assert sum(len(k) + len(v) for k, v in last.headers) < 2_000
    assert last.smaller(100) is None
