"""The writer's retry backoff."""

from __future__ import annotations

from sparktap.collector.writer import Backoff


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 4.0)
    waits = [backoff.next() for _ in range(6)]
    for wait, nominal in zip(waits, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert nominal * 0.8 <= wait <= nominal * 1.2
    backoff.reset()
    assert backoff.next() <= 0.6
