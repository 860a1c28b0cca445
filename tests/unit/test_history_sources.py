"""sparktap import: which paths are logs, and the checkpoint that makes a second import send nothing new."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktap.history import jvm
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


def test_uris_are_shown_as_they_are_and_a_missing_connector_names_its_package() -> None:
    from sparktap.history.engine_spark import as_uri, missing_connector
    from sparktap.history.sources import describe

    assert describe("file:/tmp/logs/local-1") == "file:/tmp/logs/local-1"
    assert describe("s3a://bucket/logs/app-1.zstd") == "s3a://bucket/logs/app-1.zstd"
    assert as_uri("hdfs://nn:8020/logs") == "hdfs://nn:8020/logs"
    assert as_uri("/var/x/../logs") == "file:///var/logs"
    assert missing_connector("s3a", "3.4.1", "ClassNotFoundException") == (
        'no Hadoop FileSystem for scheme="s3a": Spark does not ship its connector, hadoop-aws '
        "(org.apache.hadoop.fs.s3a.S3AFileSystem); add it with --packages org.apache.hadoop:hadoop-aws:3.4.1 "
        "(or its jar with --jars)"
    )
    assert "--packages org.apache.hadoop:hadoop-azure:3.4.1" in missing_connector("abfss", "3.4.1", "x")
    from sparktap.history.engine_spark import _task_error

    worker = RuntimeError(
        'An exception was thrown from the Python worker:\nTraceback (most recent call last):\n  File "x.py"\n'
        'sparktap.errors.ServiceError: cannot insert into ClickHouse table="task_end": Connection refused\n'
    )
    assert _task_error(worker) == (
        'sparktap.errors.ServiceError: cannot insert into ClickHouse table="task_end": Connection refused'
    )
    assert missing_connector("foo", "3.4.1", "UnsupportedFileSystemException: No FileSystem for scheme").startswith(
        'no Hadoop FileSystem for scheme="foo" on the class path (UnsupportedFileSystemException'
    )


def test_follower_metrics_count_a_cycle_and_health_turns_503_when_cycles_stop() -> None:
    from collections import Counter

    from prometheus_client import generate_latest

    from sparktap.history.follow import FollowMetrics
    from sparktap.history.importer import Summary
    from sparktap.history.sources import Skipped

    now = [1000.0]
    metrics = FollowMetrics(interval=10, clock=lambda: now[0])
    metrics.pending_since = 940.0
    metrics.in_cycle = True
    assert metrics.lag_seconds() == 60.0 and metrics.health()[0] == 200
    summary = Summary(logs=2, events=Counter({"task_end": 7, "app_start": 2}), skipped=[Skipped("/x", "bad")])
    metrics.end(summary, None)
    text = generate_latest(metrics.registry).decode()
    assert "sparktap_import_logs_total 2.0" in text
    assert 'sparktap_import_events_total{family="task_end"} 7.0' in text
    assert 'sparktap_import_errors_total{kind="skipped"} 1.0' in text
    assert "sparktap_import_lag_seconds 0.0" in text
    metrics.end(None, "cannot insert into ClickHouse")
    assert 'sparktap_import_errors_total{kind="cycle"} 1.0' in generate_latest(metrics.registry).decode()
    code, body = metrics.health()
    assert code == 200 and body["last_error"] == "cannot insert into ClickHouse" and body["cycles"] == 2
    now[0] += 3 * 10 + 61  # no cycle for longer than three intervals + 60 s
    assert metrics.health()[0] == 503


def test_engine_spark_plans_a_task_per_log_up_to_4_per_core_then_64_mb_each_largest_first(tmp_path: Path) -> None:
    from sparktap.history.engine_spark import TASK_BYTES, default_tasks, plan
    from sparktap.history.sources import LogSource

    def logs(*sizes: int) -> list[tuple[LogSource, LogState]]:
        return [(LogSource(f"file:///l/{i}", size, 0), LogState()) for i, size in enumerate(sizes)]

    assert default_tasks(logs(*[100] * 5), 2) == 5  # fewer logs than 4 per core: one task each
    assert default_tasks(logs(*[100] * 200), 2) == 8  # small logs: 4 per core
    assert default_tasks(logs(*[TASK_BYTES] * 20), 2) == 20  # big ones: ~64 MB per task
    groups = plan(logs(1, 50, 7, 30, 2, 9), 3)
    assert [[log.size for log, _ in group] for group in groups] == [[50, 7], [30, 2], [9, 1]]
    assert plan(logs(5, 6), 4) == [logs(5, 6)[1:], logs(5, 6)[:1]]
    ck = Checkpoint(tmp_path / "ck.json")
    ck.record_many({"a": LogState(1, 2), "b": LogState(3, 4)})
    assert Checkpoint(tmp_path / "ck.json").unchanged("b", 3, 4)


def test_engine_spark_gives_the_copies_a_name_says_to_one_task_and_names_those_it_could_not() -> None:
    from sparktap.history.engine_spark import copies_across_tasks, known_attempts, name_key, plan
    from sparktap.history.sources import LogSource

    assert {name_key(p) for p in ("file:///a/app-1_1", "file:///b/app-1_1.inprogress", "file:///c/app-1_1.zstd",
                                   "file:///d/app-1_1.lz4.inprogress", "hdfs://nn/e/eventlog_v2_app-1_1/")} == {
        "app-1_1"
    }  # fmt: skip
    paths = ["file:///a/app-1", "file:///b/app-2", "file:///c/app-1", "file:///d/app-3"]
    todo = [(LogSource(p, size, 0), LogState()) for p, size in zip(paths, (40, 30, 20, 10), strict=True)]
    groups = plan(todo, 3)  # app-1's two copies are one unit of 60 bytes: dealt first, to the same task
    assert [[log.path for log, _ in group] for group in groups] == [
        ["file:///a/app-1", "file:///c/app-1"],
        ["file:///b/app-2"],
        ["file:///d/app-3"],
    ]
    ck = Checkpoint(None)
    ck.logs = {
        "file:///old/x": LogState(1, 1, {"app-9\t1": 5}),
        "file:///old/y": LogState(1, 1),
        paths[1]: LogState(1, 1, {"app-2\t": 3}),
    }
    known = known_attempts(ck, todo)
    assert known == {"file:///old/x": LogState(attempts={"app-9\t1": 5})}  # only other logs, only their attempts
    # this run: app-2 from two names in two tasks (the later one named), app-9 skipped by its task (not in states)
    states = {"file:///b/app-2": LogState(1, 1, {"app-2\t": 7}), "file:///e/renamed": LogState(1, 1, {"app-2\t": 7}),
              "file:///a/app-1": LogState(1, 1, {"app-1\t": 4})}  # fmt: skip
    (twice,) = copies_across_tasks(states)
    assert twice.path == "file:///e/renamed"
    assert twice.reason.startswith('app_id="app-2" app_attempt="" was also imported from file="')
    assert "by another task of this run: one application, one copy" in twice.reason


def test_import_conf_options_must_be_key_value() -> None:
    import pytest

    from sparktap.errors import ConfigError
    from sparktap.history.cli import spark_conf

    assert spark_conf(("spark.cores.max=2", "spark.executor.extraJavaOptions=-Da=b -Dc=d")) == {
        "spark.cores.max": "2",
        "spark.executor.extraJavaOptions": "-Da=b -Dc=d",
    }
    with pytest.raises(ConfigError) as err:
        spark_conf(("spark.cores.max",))
    assert str(err.value) == (
        '--conf "spark.cores.max" is not KEY=VALUE: write it as spark-submit does, e.g. --conf spark.executor.memory=2g'
    )


def test_the_summary_says_how_many_batches_and_inserts_delivered_the_events(tmp_path: Path) -> None:
    from collections import Counter

    import pytest

    from sparktap.errors import ServiceError
    from sparktap.history.importer import Summary

    lines = Summary(logs=50, events=Counter({"task_end": 7}), batches=1, inserts=14, seconds=1.0).lines()
    assert lines[1:] == ["events: task_end 7", "delivered in 1 batches (14 inserts)"]
    assert Summary(logs=3, events=Counter({"app_start": 3}), batches=2).lines()[2] == "delivered in 2 batches"
    assert len(Summary().lines()) == 1  # nothing delivered: no line
    ck = tmp_path / "ck.json"
    (tmp_path / "ck.json.tmp").mkdir()
    checkpoint = Checkpoint(ck)
    with pytest.raises(ServiceError) as caught:
        checkpoint.record_many({"/logs/a": LogState(10, 20, {"app\t1": 5})})
    assert str(caught.value).startswith(f'cannot write the import checkpoint file="{ck}": Is a directory; ')
    assert not ck.exists()


def test_the_replay_jvm_adds_c2_for_a_run_of_big_logs_and_the_environment_overrides_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARKTAP_IMPORT_JVM_OPTIONS", raising=False)
    assert jvm.jvm_options() == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    assert jvm.jvm_options(jvm.BIG_BYTES - 1) == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    assert jvm.jvm_options(jvm.BIG_BYTES) == ["-XX:+UseSerialGC"]
    monkeypatch.setenv("SPARKTAP_IMPORT_JVM_OPTIONS", "-Xmx4g -XX:+UseG1GC")
    assert jvm.jvm_options() == jvm.jvm_options(jvm.BIG_BYTES) == ["-Xmx4g", "-XX:+UseG1GC"]
    monkeypatch.setenv("SPARKTAP_IMPORT_JVM_OPTIONS", "")
    assert jvm.jvm_options(jvm.BIG_BYTES) == []
