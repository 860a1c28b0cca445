"""sparktap import: which paths are logs, and the checkpoint that makes a second import send nothing new."""

from __future__ import annotations

from pathlib import Path

from sparktap.history.checkpoint import Checkpoint, LogState
from sparktap.history.sources import expand


def test_files_directories_and_globs_expand_to_logs_each_once(tmp_path: Path) -> None:
    (tmp_path / "local-1").write_text("x\n")
    (tmp_path / "local-2.zstd").write_text("x\n")
    (tmp_path / ".local-1.crc").write_text("c")
    (tmp_path / "other").mkdir()  # a folder that is not a rolling log: not a log
    rolling = tmp_path / "eventlog_v2_local-3"
    rolling.mkdir()
    (rolling / "events_1_local-3").write_text("abc\n")
    (rolling / "appstatus_local-3").write_text("")
    logs, skipped = expand([str(tmp_path), str(tmp_path / "local-*"), str(tmp_path / "nothing-*"), "/no/such"])
    assert [Path(log.path).name for log in logs] == ["eventlog_v2_local-3", "local-1", "local-2.zstd"]
    assert logs[0].size == 4
    assert [(s.path, s.reason) for s in skipped] == [
        (str(tmp_path / "nothing-*"), "no file matches this pattern"),
        ("/no/such", "no such file or directory"),
    ]


def test_checkpoint_survives_a_restart_and_knows_an_unchanged_log(tmp_path: Path) -> None:
    path = tmp_path / "ck" / "checkpoint.json"
    first = Checkpoint(path)
    first.record("/logs/a", LogState(10, 20, {"app-1\t": 42}))
    again = Checkpoint(path)
    assert again.unchanged("/logs/a", 10, 20)
    assert not again.unchanged("/logs/a", 11, 20)
    assert again.state("/logs/a").attempts == {"app-1\t": 42}
    assert again.state("/logs/b").attempts == {}
