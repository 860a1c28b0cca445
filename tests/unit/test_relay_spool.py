"""The relay's spool directory: bounds, the health reserve, segment lifecycle, takeover of orphans, torn lines."""

from __future__ import annotations

from pathlib import Path

from sparktap.listener.spool import HEADER_PREFIX, Spool, default_spool_dir, iter_records, parse_segment, safe_key

DEAD_PID = 999_999_999  # above any pid_max: never a live process


def value(seq: int, event_type: str = "task_end") -> bytes:
    return b'{"schema_version":1,"event_type":"' + event_type.encode() + b'","seq":' + str(seq).encode() + b"}"


def test_append_stops_at_the_byte_bound_and_reports_each_record_that_does_not_fit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1000, topic="t")
    results = [spool.append(b"app", value(i)) for i in range(1, 101)]
    spool.close()
    kept = results.count(True)
    assert results == [True] * kept + [False] * (100 - kept)  # drop newest: the first records stay
    assert 0 < kept < 100
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 1000
    assert [int(v.split(b'"seq":')[1][:-1]) for _, _, v in iter_records(tmp_path)] == list(range(1, kept + 1))


def test_health_events_may_use_the_reserve_and_write_back_ignores_the_bound(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=200, topic="t", health_reserve_bytes=500)
    while spool.append(b"app", value(1)):
        pass
    assert not spool.append(b"app", value(2))
    assert spool.append(b"app", value(3, "listener_health"), priority=True)
    assert spool.append(b"app", value(4), force=True)
    spool.close()
    seqs = [v for _, _, v in iter_records(tmp_path)]
    assert seqs[-2:] == [value(3, "listener_health"), value(4)]


def test_spooling_off_keeps_nothing(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "never", max_bytes=0, topic="t")
    assert not spool.usable
    assert not spool.append(b"app", value(1))
    assert not (tmp_path / "never").exists()


def test_sealed_segments_are_claimed_oldest_first_and_removed_when_finished(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, topic="events", segment_bytes=150)
    for i in range(1, 7):
        spool.append(b"app", value(i))
    spool.close()
    sealed = sorted(tmp_path.glob("seg-*.seg"))
    assert len(sealed) >= 2
    other = Spool(tmp_path, max_bytes=1 << 20, topic="ignored", pid=DEAD_PID - 1)
    seen: list[bytes] = []
    while (segment := other.claim_next()) is not None:
        assert segment.topic == "events"
        assert segment.path.name.endswith(f".sending-{DEAD_PID - 1}")
        seen += [v for _, v in segment.records]
        other.finish(segment)
    assert seen == [value(i) for i in range(1, 7)]
    assert list(tmp_path.iterdir()) == []


def test_open_segment_of_a_live_writer_is_left_alone_but_a_dead_writers_is_taken_over(tmp_path: Path) -> None:
    live = Spool(tmp_path, max_bytes=1 << 20, topic="t")  # this test process: alive
    live.append(b"app", value(1))
    live.flush()
    reader = Spool(tmp_path, max_bytes=1 << 20, topic="t", pid=DEAD_PID - 2)
    assert reader.claimable() == []
    dead = Spool(tmp_path, max_bytes=1 << 20, topic="t", pid=DEAD_PID)
    dead.append(b"app", value(2))
    dead.flush()  # a crashed relay: its segment stays ".open"
    (claimable,) = reader.claimable()
    assert claimable.name.endswith(f"-{DEAD_PID}-000001.open")
    segment = reader.claim(claimable)
    assert segment is not None and segment.records == [(b"app", value(2))]
    live.close()


def test_torn_last_line_and_foreign_lines_are_skipped() -> None:
    data = HEADER_PREFIX + b"topic-a\nk\t" + value(1) + b"\nnot a record\nk\t" + value(2)[:10]
    topic, records = parse_segment(data, "default")
    assert topic == "topic-a"
    assert records == [(b"k", value(1))]


def test_write_back_makes_a_sealed_segment_with_the_topic(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10, topic="t")
    spool.write_back("topic-b", [(b"k", value(7))])
    (path,) = tmp_path.glob("seg-*.seg")
    assert parse_segment(path.read_bytes(), "x") == ("topic-b", [(b"k", value(7))])


def test_keys_and_default_dir_are_safe() -> None:
    assert safe_key("local-1\t2\n") == b"local-1_2_"
    assert default_spool_dir().name.startswith("sparktap-spool-")
