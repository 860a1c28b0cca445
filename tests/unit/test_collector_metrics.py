"""The collector's Prometheus metrics: listener health counters, exposition names."""

from __future__ import annotations

from typing import Any

from sparktap.collector.metrics import CollectorMetrics, ListenerHealthTracker


def _sample(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise KeyError(name)


def test_listener_health_counters_add_only_growth() -> None:
    tracker = ListenerHealthTracker(capacity=2)

    def health(*rows: tuple[str, str, int, int]) -> dict[str, list[Any]]:
        return {
            "cluster": ["c1"] * len(rows),
            "app_id": [r[0] for r in rows],
            "app_attempt": [r[1] for r in rows],
            "events_dropped": [r[2] for r in rows],
            "kafka_events_lost": [r[3] for r in rows],
        }

    assert tracker.deltas(health(("a", "1", 5, 0), ("a", "1", 7, 1))) == [("c1", 5, 0), ("c1", 2, 1)]
    assert tracker.deltas(health(("a", "1", 6, 1))) == []  # an older, redelivered report adds nothing
    assert tracker.deltas(health(("b", "1", 3, 0))) == [("c1", 3, 0)]
    metrics = CollectorMetrics()
    metrics.observe_listener_health(health(("a", "1", 4, 2)))
    assert _sample(metrics, "sparktap_listener_events_dropped_total", cluster="c1") == 4
    assert _sample(metrics, "sparktap_listener_kafka_events_lost_total", cluster="c1") == 2


def test_metrics_exposition_names() -> None:
    metrics = CollectorMetrics()
    metrics.consumed.inc(3)
    metrics.inserted.labels("task_end").inc(2)
    metrics.dead_letters.labels("invalid").inc()
    metrics.observe_latency(list(range(1_795_000_000_000, 1_795_000_000_000 + 1000)), now=1_795_000_001.0)
    text = metrics.text().decode()
    for line in (
        "sparktap_collector_consumed_messages_total 3.0",
        'sparktap_collector_inserted_rows_total{table="task_end"} 2.0',
        'sparktap_collector_dead_letters_total{reason="invalid"} 1.0',
        'sparktap_collector_dead_letters_total{reason="too_large"} 0.0',
        "sparktap_collector_storage_up 0.0",
    ):
        assert line in text.splitlines(), line
    assert "sparktap_collector_batch_seconds_bucket" in text
    assert "sparktap_collector_lag_messages_total_approx" in text
    assert _sample(metrics, "sparktap_collector_event_latency_seconds_count") == 67  # every 15th of 1000 events
