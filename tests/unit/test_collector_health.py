"""/healthz: up during an outage, failing when stalled, saying why messages wait."""

from __future__ import annotations

import time

from sparktap.collector.health import HealthState


def test_healthz_stays_up_during_an_outage_and_fails_when_stalled() -> None:
    health = HealthState(stall_seconds=60)
    health.storage_up = True
    health.assigned = 3
    assert health.snapshot()[0] == 200 and health.snapshot()[1]["status"] == "ok"
    assert health.ready()
    health.storage_up = False
    health.paused = True
    code, body = health.snapshot()
    assert (code, body["status"], body["paused"]) == (200, "degraded", True)
    assert not health.ready()
    health.heartbeat_at -= 61
    code, body = health.snapshot()  # one snapshot: its ages move with the clock between two calls
    assert (code, body["status"]) == (503, "stalled")
    assert body["reason"].startswith("the service loop has not come round for 6")
    assert body["reason"].endswith(" s (stall_seconds=60)")


def test_healthz_says_why_when_messages_wait_for_an_insert() -> None:
    """A frozen server: the insert has not even failed yet (storage_up is still true), but messages wait."""
    health = HealthState(stall_seconds=60, insert_stall_seconds=30, storage_up=True, assigned=1)
    now = time.monotonic()
    health.pending_messages, health.pending_since, health.last_insert_at = 5, now - 2, now - 40
    assert health.snapshot()[1]["status"] == "ok"  # a batch filling up: normal
    health.pending_since = now - 12
    code, body = health.snapshot()
    assert (code, body["status"]) == (200, "degraded")
    assert body["reason"].startswith("no insert into ClickHouse succeeded for 12 s while 5 messages wait")
    health.pending_since = now - 31
    code, body = health.snapshot()
    assert (code, body["status"]) == (503, "insert_stalled")
    assert body["reason"].endswith("(unhealthy after insert_stall_seconds=30)")
    health.last_insert_at = time.monotonic()  # an insert went through: the wait starts again
    assert health.snapshot()[:1] == (200,) and health.snapshot()[1]["status"] == "ok"
    health.pending_messages = 0
    assert health.waiting() == 0.0
