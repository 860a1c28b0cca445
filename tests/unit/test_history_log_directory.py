"""sparktap import's log directory as untrusted input (docs/security.md, "The log directory"): what is listed as a
log, what is refused and how names are shown. The replay itself: tests/integration/test_history_hostile.py."""

from __future__ import annotations

import os
from pathlib import Path

from sparktap.history.sources import expand, open_log, shown


def test_names_are_shown_on_one_printable_line_whatever_bytes_they_hold() -> None:
    assert shown("local-1795943021885.zstd") == "local-1795943021885.zstd"
    assert shown("a\nskipped: forged\r") == "a\\nskipped: forged\\r"
    assert shown("\x1b]0;title\x07\x1b[2J\x7f\x9b") == "\\x1b]0;title\\x07\\x1b[2J\\x7f\\x9b"
    assert shown(os.fsdecode(b"bad-\xff\xfe")) == "bad-\\xff\\xfe"
    assert shown("rtl-\u202eexe.gol\u2028") == "rtl-\\u202eexe.gol\\u2028"
    assert shown("é日本 $(id);`x`") == "é日本 $(id);`x`"
    assert shown(shown("a\n\x1b")) == shown("a\n\x1b")  # escaping twice changes nothing


def test_only_regular_files_within_the_directory_are_logs(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("{}\n")
    (logs / "local-1").write_text("{}\n")
    odd = os.fsdecode(os.path.join(os.fsencode(logs), b"local-\n\xff"))
    Path(odd).write_text("{}\n")
    os.mkfifo(logs / "local-fifo")
    (logs / "in").symlink_to(logs / "local-1")
    (logs / "out").symlink_to(outside)
    (logs / "zero").symlink_to("/dev/zero")
    (logs / "gone").symlink_to(tmp_path / "nothing")
    found, skipped = expand([str(logs)])
    assert [log.path for log in found] == [str(logs / "local-1"), odd]  # the inside link is local-1 again
    out = "outside the directory it is in: not read (--follow-symlinks reads it)"
    assert [(Path(s.path).name, s.reason) for s in skipped] == [
        ("gone", "cannot read it: No such file or directory"),
        ("local-fifo", "not a regular file (a FIFO): only regular files are read"),
        ("out", f'a symbolic link to target="{outside}" {out}'),
        ("zero", f'a symbolic link to target="/dev/zero" {out}'),
    ]
    found, skipped = expand([str(logs)], follow_symlinks=True)
    assert [log.path for log in found] == [str(logs / "local-1"), odd, str(outside)]
    assert ("zero", "not a regular file (a character device): only regular files are read") in [
        (Path(s.path).name, s.reason) for s in skipped
    ]


def test_a_rolling_log_with_a_fifo_inside_is_refused_whole(tmp_path: Path) -> None:
    rolling = tmp_path / "eventlog_v2_local-9"
    rolling.mkdir()
    (rolling / "events_1_local-9").write_text("{}\n")
    os.mkfifo(rolling / "events_2_local-9")
    found, skipped = expand([str(tmp_path)])
    assert found == []
    assert [s.reason for s in skipped] == [
        'file="events_2_local-9" of this rolling log: not a regular file (a FIFO): only regular files are read'
    ]


def test_a_fifo_put_in_place_of_a_listed_log_is_refused_when_opened_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "local-1").write_text("{}\n")
    (log,) = expand([str(tmp_path)])[0]
    (tmp_path / "local-1").unlink()
    os.mkfifo(tmp_path / "local-1")  # no writer: a blocking open would hang here
    assert open_log(log) == "not a regular file (a FIFO): only regular files are read"
    (tmp_path / "local-1").unlink()
    (tmp_path / "local-1").symlink_to("/etc/hostname")
    assert open_log(log) == "cannot read it: Too many levels of symbolic links"
    (tmp_path / "local-1").unlink()
    (tmp_path / "local-1").write_text("{}\n")
    opened = open_log(log)
    assert not isinstance(opened, str)
    assert [name for name, _ in opened.files] == ["local-1"] and opened.in_progress is False
    opened.close()


def test_health_turns_503_when_a_cycle_runs_past_its_deadline() -> None:
    from sparktap.history.follow import FollowMetrics

    now = [1000.0]
    metrics = FollowMetrics(interval=30, clock=lambda: now[0], deadline=120)
    metrics.in_cycle, metrics.cycle_start = True, 1000.0
    now[0] = 1119.0
    assert metrics.health()[0] == 200
    now[0] = 1121.0
    code, body = metrics.health()
    assert code == 503 and body["stuck"] is True and body["cycle_seconds"] == 121.0
