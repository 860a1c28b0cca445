"""``sparktap import`` on a hostile log directory (issue 41, items 4-7 and the symlinks of 12; docs/security.md,
"The log directory"): names with newlines, carriage returns, bytes that are not UTF-8 and shell metacharacters; a
FIFO; symbolic links to /dev/zero, /etc/shadow and a log outside; a zstd file holding a 1 GiB line; an in-progress
log whose last line never ends. A real Spark application writes the good log every case copies; the imports run as
their own processes into the Debian ClickHouse server, their replay JVMs' memory read from /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparktap.local.ports import free_port, wait_until
from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import ROOT, Measured, children, eventlog_conf, rss_kb
from tests.fixtures.listener import clear_listener_properties
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.timeout(900)

JVM_BOUND_KB = 900 * 1024
"""A replay JVM's peak resident memory with ``--jvm-heap-mb 256``: the heap, Spark's classes and the JIT's code (the
1 GiB line of the bomb, read whole, took it past 3.7 GB before the cap)."""


@dataclass
class Sample:
    log: bytes
    app_id: str
    tasks: int

    def as_app(self, app_id: str) -> bytes:
        return self.log.replace(self.app_id.encode(), app_id.encode())


@pytest.fixture(scope="module")
def sample(spark_sessions: SparkSessions, tmp_path_factory: pytest.TempPathFactory) -> Sample:
    from tests.apps.history_logs import small

    directory = tmp_path_factory.mktemp("sample")
    clear_listener_properties()
    try:
        spark = spark_sessions.fresh({**eventlog_conf(directory), "spark.app.name": "history-hostile"})
        small(spark)
        app_id = spark.sparkContext.applicationId
    finally:
        spark_sessions.stop()
    log = (directory / app_id).read_bytes()
    return Sample(log, app_id, log.count(b'"Event":"SparkListenerTaskEnd"'))


@dataclass
class Store:
    storage: ServerStorage
    url: str

    def count(self, table: str, app_id: str) -> int:
        rows = self.storage.query(f"SELECT count() AS n FROM {table}_dedup WHERE app_id = '{app_id}'")
        return int(rows[0]["n"])

    def apps(self) -> set[str]:
        return {str(r["app_id"]) for r in self.storage.query("SELECT DISTINCT app_id FROM app_start_dedup")}


@pytest.fixture(scope="module")
def store(clickhouse_server: ClickHouseServer) -> Iterator[Store]:
    database = random_database("sparktap_hostile")
    storage = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    try:
        yield Store(storage, clickhouse_server.url(database))
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


def write(directory: Path, name: bytes, data: bytes) -> str:
    """A file with a name of any bytes; its path as Python names it (undecodable bytes as surrogates)."""
    path = os.path.join(os.fsencode(directory), name)
    with open(path, "wb") as f:
        f.write(data)
    return os.fsdecode(path)


def test_hostile_names_fifos_and_links_are_refused_or_imported_as_themselves(
    sample: Sample, store: Store, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    cwd = tmp_path / "cwd"  # the replay JVM's working directory: where a forged relative path would lead it
    cwd.mkdir()
    (cwd / "local-outside").write_bytes(sample.as_app("local-outside"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "local-linked-out").write_bytes(sample.as_app("local-linked-out"))
    named = {
        b"local-good": "local-good",
        b"split\nlocal-outside": "local-newline",  # one line per path: the JVM would have read ./local-outside
        b"cr\rlocal-outside": "local-cr",
        b"forged\nskipped: nothing, all is well": "local-forged",
        b"bad-\xff\xfe-name": "local-nonutf8",
        b"$(touch pwned);`touch pwned2`;'\"|&>x": "local-shell",
        b"esc-\x1b]0;title\x07-\x1b[2J": "local-escape",
    }
    paths = {app: write(logs, name, sample.as_app(app)) for name, app in named.items()}
    os.mkfifo(logs / "local-fifo")
    (logs / "zero").symlink_to("/dev/zero")
    (logs / "shadow").symlink_to("/etc/shadow")
    (logs / "local-linked-out").symlink_to(outside / "local-linked-out")
    (logs / "local-linked-in").symlink_to(logs / "local-good")  # inside: the same log, read once
    ck = tmp_path / "ck.json"
    args = [str(logs), "--storage-url", store.url, "--checkpoint", str(ck), "--cluster", "hostile"]

    first = Measured(args, cwd=cwd).wait()
    assert first.returncode == 1, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].startswith(f"imported {len(named)} logs: {len(named)} applications, "), lines
    rel = os.path.relpath(logs, cwd)
    assert [line for line in lines if line.startswith("skipped")] == [
        f"skipped: {rel}/local-fifo: not a regular file (a FIFO): only regular files are read",
        f'skipped: {rel}/local-linked-out: a symbolic link to target="{outside}/local-linked-out" outside the '
        "directory it is in: not read (--follow-symlinks reads it)",
        f'skipped: {rel}/shadow: a symbolic link to target="/etc/shadow" outside the directory it is in: not read '
        "(--follow-symlinks reads it)",
        f'skipped: {rel}/zero: a symbolic link to target="/dev/zero" outside the directory it is in: not read '
        "(--follow-symlinks reads it)",
    ]
    assert len(lines) == 3 + 4, lines  # the totals, the families, the batches, the four refusals: no forged line
    assert all(line.isprintable() for line in first.stdout.splitlines())
    assert "\x1b" not in first.stdout and "\r" not in first.stdout
    # every log stored as itself, whole; nothing from outside the directory
    assert store.apps() == set(named.values())
    for app in named.values():
        assert store.count("task_end", app) == sample.tasks, app
        assert store.count("app_end", app) == 1, app
    assert not (cwd / "pwned").exists() and not (logs / "pwned").exists() and not (ROOT / "pwned").exists()
    # the checkpoint holds each name exactly, undecodable bytes included, each with its own application
    states = json.loads(ck.read_text())["logs"]
    assert set(states) == set(paths.values())
    for app, path in paths.items():
        assert list(states[path]["attempts"]) == [f"{app}\t"], path
    # run again: nothing is sent, the refusals are said again
    again = Measured(args, cwd=cwd).wait()
    assert again.returncode == 1
    again_lines = again.stdout.splitlines()
    assert again_lines[0].startswith("imported 0 logs: 0 applications, 0 events"), again_lines
    assert f"unchanged since the last import (nothing to send): {len(named)} logs" in again_lines
    # --follow-symlinks: the link out is read; a device still is not
    linked = Measured([*args, "--follow-symlinks"], cwd=cwd).wait()
    linked_lines = linked.stdout.splitlines()
    # the link out, and /etc/shadow: read, and stopped at its first line (not a Spark event)
    assert linked_lines[0].startswith("imported 1 logs: 1 applications, "), linked_lines
    shadow = os.path.relpath("/etc/shadow", cwd)  # a followed link is named by its target
    assert sorted(line for line in linked_lines if line.startswith("skipped")) == sorted(
        [
            f"skipped: {rel}/local-fifo: not a regular file (a FIFO): only regular files are read",
            f"skipped: {rel}/zero: not a regular file (a character device): only regular files are read",
            f'skipped: {shadow}: line 1 of file="shadow" is not a Spark event (malformed JSON or an unknown event '
            "layout): nothing imported",
        ]
    )
    assert store.count("task_end", "local-linked-out") == sample.tasks


def test_the_spark_engine_refuses_fifos_and_links_out_before_spark_reads_them(
    sample: Sample, store: Store, tmp_path: Path
) -> None:
    """``--engine spark`` lists through Hadoop's FileSystem, and a local file gets the local engine's checks before
    any task opens it: a FIFO (which would block the task) and links out of the directory are refused, one line each
    naming the entry; a link to a log inside is that log, imported once. One Spark run covers them all."""
    logs = tmp_path / "logs"
    logs.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (logs / "spark-good").write_bytes(sample.as_app("spark-good"))
    (outside / "spark-linked-out").write_bytes(sample.as_app("spark-linked-out"))
    os.mkfifo(logs / "spark-fifo")
    (logs / "zero").symlink_to("/dev/zero")
    (logs / "spark-linked-out").symlink_to(outside / "spark-linked-out")
    (logs / "spark-linked-in").symlink_to(logs / "spark-good")
    run = Measured(
        [str(logs), "--engine", "spark", "--storage-url", store.url, "--checkpoint", str(tmp_path / "ck.json"),
         "--cluster", "hostile-spark"],
    ).wait()  # fmt: skip
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("imported 1 logs: 1 applications, "), lines
    assert [line for line in lines if line.startswith("skipped")] == [
        f"skipped: file://{logs}/spark-fifo: not a regular file (a FIFO): only regular files are read",
        f'skipped: file://{logs}/spark-linked-out: a symbolic link to target="{outside}/spark-linked-out" outside the '
        "directory it is in: not read (--follow-symlinks reads it)",
        f'skipped: file://{logs}/zero: a symbolic link to target="/dev/zero" outside the directory it is in: not read '
        "(--follow-symlinks reads it)",
    ]
    assert {"spark-good", "spark-linked-out"} & store.apps() == {"spark-good"}
    assert (store.count("app_start", "spark-good"), store.count("task_end", "spark-good")) == (1, sample.tasks)


def zstd_bomb(path: Path, line_bytes: int) -> None:
    """A zstd log of a Spark log start and one line of ``line_bytes`` bytes: tens of KB on disk."""
    import zstandard

    chunk = b"x" * (1 << 24)
    with path.open("wb") as f, zstandard.ZstdCompressor(level=3).stream_writer(f, closefd=False) as w:
        w.write(b'{"Event":"SparkListenerLogStart","Spark Version":"4.0.0"}\n')
        for _ in range(line_bytes // len(chunk)):
            w.write(chunk)
        w.write(b"\n")


def test_a_zstd_bomb_stops_at_the_line_cap_or_fails_alone_and_the_logs_beside_it_are_stored(
    sample: Sample, store: Store, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    bomb = logs / "local-bomb.zstd"
    zstd_bomb(bomb, 1 << 30)
    assert bomb.stat().st_size < 200_000
    (logs / "local-before").write_bytes(sample.as_app("local-before"))  # sorted before the bomb, and after it
    (logs / "local-calm").write_bytes(sample.as_app("local-calm"))
    args = [str(logs), "--storage-url", store.url, "--cluster", "hostile", "--jvm-heap-mb", "256"]
    capped = Measured([*args, "--checkpoint", str(tmp_path / "ck1.json"), "--max-line-mb", "16"], cwd=tmp_path)
    out = capped.wait()
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines and lines[0].startswith("imported 2 logs: 2 applications, "), (lines, out.stderr[-2000:])
    assert [line for line in lines if line.startswith(("stopped", "skipped"))] == [
        'skipped: logs/local-bomb.zstd: line 2 of file="local-bomb.zstd" is longer than the line cap of '
        "16777216 bytes (--max-line-mb): nothing imported"
    ]
    assert store.count("task_end", "local-before") == store.count("task_end", "local-calm") == sample.tasks
    assert len(capped.jvm_peaks) == 1 and max(capped.jvm_peaks.values()) < JVM_BOUND_KB, capped.jvm_peaks
    # no line cap to speak of: the JVM runs out of its heap on the bomb, that log is named, a fresh JVM goes on
    for name in ("local-before", "local-calm"):
        (logs / name).write_bytes(sample.as_app(name + "-2"))
    uncapped = Measured([*args, "--checkpoint", str(tmp_path / "ck2.json"), "--max-line-mb", "4096"], cwd=tmp_path)
    out = uncapped.wait()
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines and lines[0].startswith("imported 2 logs: 2 applications, "), (lines, out.stderr[-2000:])
    problems = [line for line in lines if line.startswith(("stopped", "skipped"))]
    assert problems == [
        "stopped early: logs/local-bomb.zstd: the replay JVM stopped (exit code 3) after 0 events of this log: "
        "Terminating due to java.lang.OutOfMemoryError: Java heap space; its heap is capped at 256 MB: give more "
        "with --jvm-heap-mb, or leave this log out (the logs beside it were imported)"
    ], lines
    assert "Traceback" not in out.stderr
    assert store.count("task_end", "local-before-2") == store.count("task_end", "local-calm-2") == sample.tasks
    assert len(uncapped.jvm_peaks) == 2, uncapped.jvm_peaks  # the one the bomb took down, and its successor
    assert max(uncapped.jvm_peaks.values()) < JVM_BOUND_KB, uncapped.jvm_peaks
    checkpointed = json.loads((tmp_path / "ck2.json").read_text())["logs"]
    assert sorted(checkpointed) == [str(logs / "local-before"), str(logs / "local-calm")]  # the bomb: tried again


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_follow_bounds_an_unending_line_refuses_a_fifo_reports_a_stuck_cycle_and_stops_on_sigterm(
    sample: Sample, store: Store, tmp_path: Path
) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    os.mkfifo(watched / "local-fifo")
    (watched / "local-steady").write_bytes(sample.as_app("local-steady"))
    growing = watched / "local-unending.inprogress"
    growing.write_bytes(sample.as_app("local-unending") + b'{"Event":"SparkListenerJobStart","Job ID":')
    port = free_port()
    out_path = tmp_path / "follow.out"
    deadline, grace = 4.0, 3.0
    with out_path.open("wb") as out:
        follower = subprocess.Popen(
            [sys.executable, "-m", "sparktap", "import", str(watched), "--follow", "--interval", "0.3",
             "--storage-url", store.url, "--checkpoint", str(tmp_path / "ck.json"), "--cluster", "hostile",
             "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--max-line-mb", "8", "--jvm-heap-mb",
             "256", "--cycle-deadline", str(deadline), "--stop-grace", str(grace)],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    jvm_peaks: dict[int, int] = {}

    def jvms() -> list[int]:
        pids = children(follower.pid)
        for pid in pids:
            jvm_peaks[pid] = max(jvm_peaks.get(pid, 0), rss_kb(pid))
        return pids

    def looked_twice_since(cycles: int) -> bool:
        jvms()
        return int(health(port)[1]["cycles"]) >= cycles + 2

    try:
        wait_until(lambda: store.count("task_end", "local-steady") == sample.tasks, 180, "the steady log stored")
        wait_until(lambda: store.count("app_end", "local-unending") == 1, 60, "the in-progress log's lines stored")
        follower_before = rss_kb(follower.pid, "VmRSS")
        # the last line never ends: 8 appends of 4 MiB take it past the 8 MiB cap, each look re-reads at most that
        for i in range(8):
            with growing.open("ab") as f:
                f.write(b"7" * (4 << 20))
            cycles = int(health(port)[1]["cycles"])
            wait_until(lambda c=cycles: looked_twice_since(c), 120, f"two looks after append {i}")
        follower_after = rss_kb(follower.pid, "VmRSS")
        assert follower_after - follower_before < 64 * 1024, (follower_before, follower_after)
        assert jvm_peaks and max(jvm_peaks.values()) < JVM_BOUND_KB, jvm_peaks
        assert health(port)[0] == 200
        # a stuck cycle: its replay JVM stopped (as on a hung file system); past the deadline /healthz says 503
        os.utime(watched / "local-steady", ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
        (stuck,) = wait_until(jvms, 60, "a cycle's replay JVM")
        os.kill(stuck, signal.SIGSTOP)
        status, body = wait_until(lambda: (h := health(port))[0] == 503 and h, deadline + 60, "/healthz says 503")
        assert body["stuck"] is True and body["in_cycle"] is True and body["cycle_seconds"] > deadline
        started = time.monotonic()
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=grace + 30)
        stopped_in = time.monotonic() - started
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    text = out_path.read_text(errors="replace")
    assert follower.returncode == 0, text[-3000:]
    assert stopped_in < grace + 15, stopped_in
    assert text.splitlines()[-1] == "stopped following", text[-3000:]
    assert text.count("skipped: watched/local-fifo: not a regular file (a FIFO): only regular files are read") == 1
    unending_line = sample.log.count(b"\n") + 1
    cap_line = (
        f"stopped early: watched/local-unending.inprogress: line {unending_line} of "
        'file="local-unending.inprogress" is longer than the line cap of 8388608 bytes (--max-line-mb): the events '
        "before it were imported"
    )
    assert cap_line in text.splitlines(), text[-3000:]
    assert "Traceback" not in text
    assert store.count("task_end", "local-unending") == sample.tasks
