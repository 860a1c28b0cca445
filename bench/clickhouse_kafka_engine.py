"""Benchmark: ClickHouse's own Kafka table engine with a materialized view against ``sparktap collect``, landing
the same messages in the same table on the same ClickHouse server, in one run.

    python -m bench.clickhouse_kafka_engine [--events 200000] [--partitions 4] [--consumers 1] [--repeat 3]
                                            [--no-rollups] [--stop-merges] [--kafka-client auto]

Input: the collector benchmark's realistic ``task_end`` messages (~730 bytes) produced once to a fresh topic on a
real Apache Kafka broker (tests.support.services.kafka). One throwaway clickhouse-server (the Debian 18.16 here,
tests.support.services.clickhouse) holds two databases with sparktap's own schema for that server:

- ``sparktap collect`` (the consumer-group collector in this process, default settings: its own consumer on
  librdkafka's C API since issue 27's round 10, ``--kafka-client confluent-kafka`` for confluent-kafka's; with
  glibc's malloc tuned as the command tunes it on a server store: ``share_one_arena``, collector/memory.py;
  ``MALLOC_ARENA_MAX=8`` in the environment leaves glibc's own arenas) into the first;
- in the second, a ``Kafka`` engine table with the stored columns of ``task_end`` (``JSONEachRow``: fields a
  message leaves out take the column defaults, as sparktap's reader does) and a materialized view into a copy of
  ``task_end`` (same columns, engine, partitioning and sort key; ``target_ddl`` says why not task_end itself),
  the server's default flush settings, ``--consumers`` (kafka_num_consumers). The server's config.xml sets
  ``<kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>``: without it 18.16 starts a new group at the
  end of the topic and lands nothing of a backfill. The engine's rows also feed the same pipeline-health views as
  the collector's inserts into ``task_end`` (``--no-rollups``: the engine's copy of ``task_end`` only).

It runs ``--repeat`` pairs (3), each into two fresh databases, sparktap first in the odd pairs and the engine first
in the even ones (whichever side ran first in a pair was dearer, for reasons not found: work left on the server is
not one, as each run starts on a quiet server, ``settle``), and gives each pair's ratios; the verdict is their
median. The CPU figures of one run move by ±10 % on this
host, as much as the gap they judge (docs/benchmarks.md, issue 27 rounds 7-9).

Both databases of a pair get their schema before anything is timed (the collector then starts on an existing
store, as after a restart). Each is timed until all its rows are in (sparktap: until ``on_batch`` reported them,
i.e. ClickHouse confirmed them; the line says when it first did, which for a backlog written as one INSERT stream
is near the end; the engine: from its view's creation until the server's parts hold every row). CPU per row: the
ClickHouse server's CPU (/proc) plus, for sparktap, this process's (the first pair's includes what a process pays
once: its first Kafka client, its first ClickHouse connection, pyarrow's first kernels); for the engine, the
server's less what its query threads spent meanwhile on this benchmark's own statements and polls (the engine runs
on background threads). Both tables are compared (count, sums, distinct task ids) to show they landed the same
data, and so are the pipeline-health rollups.

Prints one line per figure, each pair's ratios and, last, the verdict; never part of the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any

from bench._collector_run import produce_tasks, run_collector
from bench._proc import cpu_seconds, thread_cpu

# The server's librdkafka settings (config.xml <kafka>): 18.16 leaves librdkafka's auto.offset.reset=largest, so a
# new group would skip every message already in the topic; a backfill needs smallest.
KAFKA_CONFIG = "<kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>"
TARGET = "task_end_kafka_engine"
CHECK = "SELECT count() AS n, sum(duration_ms) AS d, sum(shuffle_remote_bytes) AS r, uniqExact(app_id, task_id) AS u"


def query_threads_cpu(before: dict[str, tuple[str, float]], after: dict[str, tuple[str, float]]) -> float:
    """CPU seconds the server's query threads (``TCPHandler``, one per client connection) spent between two
    ``thread_cpu`` snapshots."""
    return sum(
        cpu - before.get(tid, ("", 0.0))[1]
        for tid, (name, cpu) in after.items()
        if name == "TCPHandler" or before.get(tid, ("", 0.0))[0] == "TCPHandler"
    )


def stored_columns(storage: Any) -> list[tuple[str, str]]:
    """(name, type) of task_end's ordinary columns (no MATERIALIZED or ALIAS) as the server has them."""
    rows = storage.query(
        f"SELECT name, type, default_kind FROM system.columns WHERE database = '{storage.database}' "  # noqa: S608
        "AND table = 'task_end'"
    )
    return [(r["name"], r["type"]) for r in rows if r["default_kind"] in ("", "DEFAULT")]


def materialized(storage: Any) -> list[tuple[str, str]]:
    """(name, expression) of task_end's MATERIALIZED columns: the view computes them (see target_ddl)."""
    rows = storage.query(
        f"SELECT name, default_expression FROM system.columns WHERE database = '{storage.database}' "  # noqa: S608
        "AND table = 'task_end' AND default_kind = 'MATERIALIZED'"
    )
    return [(r["name"], r["default_expression"]) for r in rows]


def target_ddl(storage: Any) -> str:
    """sparktap's task_end DDL for this server, as table TARGET with its MATERIALIZED columns made ordinary and its
    ALIAS columns left out: on 18.16 a materialized view ``TO`` sparktap's own task_end lands nothing (the engine
    logs "Committing 0 messages" and no error), while the same columns, engine, partitioning and sort key work."""
    spec = storage.table_spec("task_end")
    lines = []
    for line in storage.schema().create_table(spec).splitlines():
        if " ALIAS " in line:
            continue
        if " MATERIALIZED " in line:
            line = line.split(" MATERIALIZED ", 1)[0] + ","
        lines.append(line.replace("`task_end`", f"`{TARGET}`"))
    return "\n".join(lines).replace(",\n)", "\n)")


def rollup_views(storage: Any, source: str) -> list[tuple[str, str]]:
    """(qualified name, CREATE statement) of the pipeline-health views sparktap's schema hangs on ``task_end`` (one
    per health table), reading ``source`` instead: the engine's rows then feed the same rollups as the collector's,
    so the server does the same work for both. They read the Kafka table itself, because 18.16 does not fire a view
    on another view's target."""
    from sparktap.schemas.health_rollups import health_tables, select

    schema = storage.schema()
    out = []
    for table in health_tables():
        text = select(schema, table, "task_end").replace(schema.qualified("task_end"), schema.qualified(source), 1)
        name = schema.qualified(f"kafka_{table.name}_mv")
        out.append((name, f"CREATE MATERIALIZED VIEW {name} TO {schema.qualified(table.name)} AS {text}"))
    return out


def rollup_rows(storage: Any) -> list[tuple[Any, ...]]:
    """Every health-rollup row of ``task_end``'s events, merged: what both paths must have stored."""
    from sparktap.schemas.health_rollups import health_tables

    out = []
    for table in health_tables():
        rows = storage.query(
            f"SELECT count() AS n, sum(m) AS s FROM (SELECT app_id, event_time, seq_block, "  # noqa: S608
            f"groupBitOrMerge(seq_mask) AS m FROM {storage.qualified(table.name)} "
            "WHERE event_table = 'task_end' GROUP BY app_id, event_time, seq_block)"
        )
        out.append((table.name, int(rows[0]["n"]), int(rows[0]["s"])))
    return out


def landed(storage: Any, table: str) -> int:
    """Rows in ``table``'s active parts, from the server's part list (cheaper than ``SELECT count()``, which on
    18.16 reads a column of every part). The poll still costs the server about 1.5 ms each time, 0.15 s over a
    run at one poll every 50 ms: the engine's figure leaves its query threads out (``query_threads_cpu``)."""
    rows = storage.query(
        f"SELECT sum(rows) AS n FROM system.parts WHERE active AND database = '{storage.database}' "  # noqa: S608
        f"AND table = '{table}'"
    )
    return int(rows[0]["n"] or 0)


QUIET_CPU_SHARE = 0.02
"""a server is quiet when it spends less than this share of one core over QUIET_WINDOW seconds"""
QUIET_WINDOW = 0.5
QUIET_DEADLINE = 60.0


def settle(server: Any, storage: Any) -> str:
    """Wait (up to QUIET_DEADLINE) until the server runs no merge and is nearly idle, so that no run pays for what
    the one before it left on the server (its parts' background merges, a new schema's tables). Returns a note for
    the run's line: in round 9 the server was quiet within 0.5-1.5 s before every run."""
    started = time.monotonic()
    while time.monotonic() - started < QUIET_DEADLINE:
        merges = int(storage.query("SELECT count() AS n FROM system.merges")[0]["n"])
        before = cpu_seconds(server.pid)
        time.sleep(QUIET_WINDOW)  # noqa: S311 - measuring the server's CPU over a window, against a deadline
        busy = (cpu_seconds(server.pid) - before) / QUIET_WINDOW
        if not merges and busy < QUIET_CPU_SHARE:
            return f"server quiet after {time.monotonic() - started:.1f}s"
    return f"server still busy after {QUIET_DEADLINE:g}s (merges {merges}, {busy:.0%} of a core): timed anyway"


def run_sparktap(server: Any, bootstrap: str, topic: str, database: str, args: argparse.Namespace) -> dict[str, float]:
    """``sparktap collect`` from ``topic`` into ``database`` (its schema already there): prints its line."""
    from sparktap.store import open_storage

    ours = open_storage(server.target(database))
    try:
        if args.stop_merges:
            ours.command(f"SYSTEM STOP MERGES {ours.qualified('task_end')}")
        quiet = settle(server, ours)
        server_cpu = cpu_seconds(server.pid)
        url = server.url(database)
        collected = run_collector(bootstrap, topic, args.events, url=url, kafka_client=args.kafka_client)
        server_cpu = cpu_seconds(server.pid) - server_cpu
    finally:
        ours.close()
    wall = collected["wall"] + collected["join"]
    cpu = (collected["cpu"] + server_cpu) / args.events
    print(
        f"sparktap collect: {args.events / wall:,.0f} rows/s end to end ({args.events} rows in {wall:.1f}s, first "
        f"report after {collected['join']:.1f}s); CPU {cpu * 1e6:.1f} µs/row (collector "
        f"{collected['cpu'] / args.events * 1e6:.1f}, server {server_cpu / args.events * 1e6:.1f}); "
        f"{collected['batches']:.0f} batches; INSERT streams (batches in one INSERT): {collected['streams']:.0f}; "
        f"kafka_client={args.kafka_client}; {quiet}",
        flush=True,
    )
    return {"wall": wall, "cpu": cpu}


ENGINE_ATTEMPTS = 3
STALLED_SECONDS = 30.0
"""18.16's engine sometimes never consumes: its group stays without rows (2 of 15 runs in issue 27's round 7, 5 of 26
in round 9; the same input and broker as every other run). A run that lands nothing within this
long is dropped and started again with a new group, at most ENGINE_ATTEMPTS times, and says so."""


def run_engine(server: Any, bootstrap: str, topic: str, engine: Any, args: argparse.Namespace) -> dict[str, float]:
    """ClickHouse's Kafka engine from ``topic`` into ``engine``'s database (its schema already there, TARGET made
    here): prints its line."""
    engine.command(target_ddl(engine))
    for attempt in range(1, ENGINE_ATTEMPTS + 1):
        result = engine_attempt(server, bootstrap, topic, engine, args)
        if result is not None:
            return result
        print(
            f"(the Kafka engine's group landed nothing within {STALLED_SECONDS:g}s, attempt {attempt} of "
            f"{ENGINE_ATTEMPTS}: dropped, and started again with a new group)",
            flush=True,
        )
    raise RuntimeError(f"the Kafka engine landed nothing in {ENGINE_ATTEMPTS} attempts")


def engine_attempt(
    server: Any, bootstrap: str, topic: str, engine: Any, args: argparse.Namespace
) -> dict[str, float] | None:
    """One run of the engine with a new group; None when it landed nothing within ``STALLED_SECONDS``."""
    columns = stored_columns(engine)
    computed = materialized(engine)
    names = ", ".join([f"`{n}`" for n, _t in columns] + [f"{expr} AS `{n}`" for n, expr in computed])
    db = engine.database
    engine.command(
        f"CREATE TABLE `{db}`.kafka_task_end ({', '.join(f'`{n}` {t}' for n, t in columns)}) "
        f"ENGINE = Kafka('{bootstrap}', '{topic}', 'bench-engine-{uuid.uuid4().hex[:6]}', 'JSONEachRow')"
        + (f" SETTINGS kafka_num_consumers = {args.consumers}" if args.consumers != 1 else "")
    )
    views = rollup_views(engine, "kafka_task_end") if args.rollups else []
    quiet = settle(server, engine)
    threads = thread_cpu(server.pid)
    server_cpu = cpu_seconds(server.pid)
    started = time.monotonic()
    for _, create in views:  # the engine consumes from its first view on: all are in place within milliseconds
        engine.command(create)
    engine.command(
        f"CREATE MATERIALIZED VIEW `{db}`.kafka_mv TO `{db}`.{TARGET} AS SELECT {names} FROM `{db}`.kafka_task_end"
    )
    first = None
    deadline = started + args.timeout
    while (rows := landed(engine, TARGET)) < args.events and time.monotonic() < deadline:
        if rows and first is None:
            first = time.monotonic()
        if not rows and time.monotonic() - started > min(STALLED_SECONDS, args.timeout):
            break
        time.sleep(0.05)  # noqa: S311 - polling a server-side consumer against a deadline
    finished = time.monotonic()
    server_cpu = cpu_seconds(server.pid) - server_cpu
    # the engine consumes and inserts on the server's background threads; its query threads meanwhile serve only
    # this benchmark (the views' CREATE statements and the polls above), which is not the engine's work
    polls_cpu = query_threads_cpu(threads, thread_cpu(server.pid))
    server_cpu -= polls_cpu
    engine.command(f"DROP TABLE `{db}`.kafka_mv")
    for view, _ in views:
        engine.command(f"DROP TABLE {view}")
    engine.command(f"DROP TABLE `{db}`.kafka_task_end")
    if not rows:
        return None
    if rows < args.events:
        raise RuntimeError(f"the Kafka engine landed {rows} of {args.events} rows within {args.timeout:g}s")
    wall = finished - started
    print(
        f"Kafka engine + materialized view (kafka_num_consumers={args.consumers}): "
        f"{args.events / wall:,.0f} rows/s end to end ({args.events} rows in {wall:.1f}s from the view's creation, "
        f"first rows after {(first or finished) - started:.1f}s: group join and the engine's flush interval); CPU "
        f"{server_cpu / args.events * 1e6:.1f} µs/row (all in the server, less the {polls_cpu:.2f}s its query "
        f"threads spent on this benchmark's own statements and polls); {quiet}",
        flush=True,
    )
    return {"wall": wall, "cpu": server_cpu / args.events}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=1, help="kafka_num_consumers of the Kafka engine table")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="pairs of runs (sparktap first in the odd ones, the engine first in the even ones); the verdict is the "
        "median of the pairs' ratios",
    )
    parser.add_argument(
        "--rollups",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="feed the engine's rows into the same pipeline-health rollups as the collector's (--no-rollups: the "
        "engine fills its table only, while the collector's inserts still feed the rollups)",
    )
    parser.add_argument(
        "--stop-merges",
        action="store_true",
        help="stop the background merges of the collector's task_end during its run, to show their share of the "
        "server's CPU (the engine's one flush makes one part, which nothing merges within its window)",
    )
    parser.add_argument(
        "--kafka-client",
        choices=("auto", "librdkafka", "confluent-kafka"),
        default="auto",
        help="the collector's consumer (SPARKTAP_COLLECTOR__KAFKA_CLIENT): its own on librdkafka's C API (auto here) "
        "or confluent-kafka's, to compare the two",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="longest wait for the Kafka engine's rows")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    from sparktap.collector.memory import share_one_arena

    share_one_arena()  # what ``sparktap collect`` does on a server store before any thread starts (memory.py)
    from sparktap.local.broker import create_topic
    from sparktap.store import open_storage
    from tests.support.services.clickhouse import ClickHouseServerProcess
    from tests.support.services.kafka import ApacheKafkaBroker

    broker = ApacheKafkaBroker().start()
    server = ClickHouseServerProcess(config_extra=KAFKA_CONFIG).start()
    bootstrap = broker.bootstrap_servers
    storages: list[Any] = []
    ratios: list[tuple[float, float]] = []
    try:
        assert server.pid is not None
        topic = f"bench-chkafka-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        create_topic(bootstrap, f"{topic}.dlq", partitions=1)
        produced = produce_tasks(bootstrap, topic, args.events)
        for pair in range(1, args.repeat + 1):
            # both schemas exist before anything is timed, as for a collector restarting
            ours = open_storage(server.target(f"bench_sparktap_{pair}"))
            engine = open_storage(server.target(f"bench_kafka_engine_{pair}"))
            storages += [ours, engine]
            engine.ensure_schema()
            ours.ensure_schema()
            if pair == 1:
                version = engine.query("SELECT version() AS v")[0]["v"]
                has_kafka = engine.query("SELECT count() AS n FROM system.table_engines WHERE name = 'Kafka'")
                print(
                    f"input: {args.events} events on {args.partitions} partitions of Apache Kafka, produced in "
                    f"{produced:.1f}s; clickhouse-server {version} (system.table_engines lists Kafka: "
                    f"{bool(has_kafka[0]['n'])}); {args.repeat} pairs of runs"
                )
            print(f"pair {pair} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):", flush=True)
            if pair % 2:
                mine = run_sparktap(server, bootstrap, topic, ours.database, args)
                theirs = run_engine(server, bootstrap, topic, engine, args)
            else:
                theirs = run_engine(server, bootstrap, topic, engine, args)
                mine = run_sparktap(server, bootstrap, topic, ours.database, args)
            same = [s.query(f"{CHECK} FROM {s.qualified(t)}")[0] for s, t in ((ours, "task_end"), (engine, TARGET))]
            print(f"same data landed: {same[0] == same[1]} ({same[0]})")
            if args.rollups:
                rolled = [rollup_rows(ours), rollup_rows(engine)]
                print(f"same pipeline-health rollups: {rolled[0] == rolled[1]} ({rolled[0]})")
            ratios.append((theirs["wall"] / mine["wall"], mine["cpu"] / theirs["cpu"]))
            print(f"pair {pair} ratio: rows_per_s={ratios[-1][0]:.2f} cpu_per_row={ratios[-1][1]:.2f}", flush=True)
        rows_ratio = statistics.median(r for r, _ in ratios)
        cpu_ratio = statistics.median(c for _, c in ratios)
        if args.repeat > 1:
            print(f"the verdict below: the medians of the {args.repeat} pairs' ratios")
        print(f"ratio sparktap/kafka_engine: rows_per_s={rows_ratio:.2f} cpu_per_row={cpu_ratio:.2f}")
    finally:
        for storage in storages:
            storage.close()
        server.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
