"""Benchmark: a ClickHouse cluster beside one node (Debian clickhouse-server 18.16 and ZooKeeper on 127.0.0.1).

    python -m bench.cluster [--tasks 10000000] [--layout 1,1] [--ingest-rows 200000] [--repeat 3]

1. Ingest: the collector's insert (``Storage.insert_columns`` of task_end rows built by ``schemas/rows.py``, batches of
   ``--batch`` rows) into one node, through the Distributed table (``insert_distributed_sync=1``), and straight into
   the local tables, split by shard in the client (``cityHash64(app_id) % shards``, what the Distributed table does).
2. Detection: ``bench.detection_query.generate`` fills ``--tasks`` task rows (100 applications x 100 stages) on one
   node and on the cluster (through the Distributed tables), then times the all-rules query (finished + running
   stages) and the slowest per-rule Grafana alert query on both.

One line per figure, side by side (ratio). All servers share this machine's cores: a cluster on separate hosts has
``shards`` times the CPU and disks, which this run cannot show (docs/cluster.md, sizing).
"""

# ruff: noqa: S608 - benchmark SQL built from constants.

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.detection_query import BASE_MS, SPAN_MS, _timed, generate


def _task_rows(n: int, apps: int, version: tuple[int, ...]) -> list[dict[str, Any]]:
    from sparktap.schemas.examples import example_event
    from sparktap.schemas.rows import RowBuilder

    base = example_event("task_end").model_dump(mode="json")
    now = int(time.time() * 1000)
    events = [
        {
            **base,
            "app_id": f"app-{i % apps:04d}",
            "seq": i // apps + 1,
            "task_id": i,
            "event_time_ms": now,
            "emitted_at_ms": now,
            "launch_time_ms": now - 50,
            "finish_time_ms": now,
        }
        for i in range(n)
    ]
    return RowBuilder(version).group(events)["task_end"]


def _ingest(label: str, write: Any, rows: list[dict[str, Any]], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        write(rows[i : i + batch])
    seconds = time.perf_counter() - start
    print(f"cluster bench: ingest {label}: {len(rows) / seconds:,.0f} rows/s ({len(rows):,} rows in {seconds:.1f} s)")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000_000)
    parser.add_argument("--layout", default="1,1", help="replicas per shard, e.g. 1,2 (default 2 shards of 1)")
    parser.add_argument("--ingest-rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from sparktap.dashboards.alerts import alert_query
    from sparktap.dashboards.config import GrafanaConfig
    from sparktap.detection import RULE_IDS, rule_query
    from sparktap.detection.macros import expand, interpolate
    from sparktap.detection.sql import SqlContext
    from sparktap.store import ServerStorage, StorageError, open_storage
    from tests.support.services.clickhouse import ClickHouseServerProcess
    from tests.support.services.cluster import ClickHouseCluster

    layout = tuple(int(x) for x in args.layout.split(","))
    from_ms, to_ms = BASE_MS - 3_600_000, BASE_MS + SPAN_MS + 3_600_000
    variables = {"cluster": ["bench"], "app": ["app-bench-0"]}
    with (
        tempfile.TemporaryDirectory(prefix="sparktap-bench-cluster-") as tmp,
        ClickHouseServerProcess(Path(tmp) / "single", startup_timeout=60) as single,
        ClickHouseCluster(layout, workdir=Path(tmp) / "cluster") as cluster,
    ):
        one_in = open_storage(single.target("ingest"), send_receive_timeout=600)
        many_in = open_storage(cluster.target("ingest"), send_receive_timeout=600)
        version = one_in.version()
        print(
            f"cluster bench: ClickHouse {'.'.join(map(str, version))}, cluster of {len(layout)} shards "
            f"(replicas {args.layout}) beside one node, all on 127.0.0.1"
        )
        for storage in (one_in, many_in):
            storage.ensure_schema()

        # --- 1. ingest (database "ingest")
        rows = _task_rows(args.ingest_rows, 64, version)
        single_s = _ingest("one node", lambda b: one_in.insert("task_end", b), rows, args.batch)
        dist_s = _ingest(
            "cluster, through the Distributed table (sync)", lambda b: many_in.insert("task_end", b), rows, args.batch
        )
        locals_ = [
            ServerStorage(cluster.target("ingest", s).model_copy(update={"cluster": None})) for s in range(len(layout))
        ]
        apps = sorted({r["app_id"] for r in rows})
        shard_of = {
            str(r["a"]): int(r["s"])
            for r in many_in.query(
                f"SELECT a, cityHash64(a) % {len(layout)} AS s FROM (SELECT arrayJoin({apps!r}) AS a)"
            )
        }

        def by_shard(batch: list[dict[str, Any]]) -> None:
            for s, storage in enumerate(locals_):
                part = [r for r in batch if shard_of[r["app_id"]] == s]
                storage.insert("task_end_local", part)

        local_s = _ingest("cluster, straight into the local tables by shard", by_shard, rows, args.batch)
        print(
            f"cluster bench: ingest Distributed / by shard time x{dist_s / local_s:.2f}, "
            f"Distributed / one node x{dist_s / single_s:.2f}"
        )
        counts = [int(s.query("SELECT count() AS n FROM task_end_dedup")[0]["n"]) for s in (one_in, many_in)]
        print(f"cluster bench: ingest rows after dedup: one node {counts[0]:,}, cluster {counts[1]:,}")
        for storage in (*locals_, one_in, many_in):
            storage.close()

        # --- 2. detection over --tasks task rows (database "bench")
        one = open_storage(single.target("bench"), send_receive_timeout=600)
        many = open_storage(cluster.target("bench"), send_receive_timeout=600)
        for storage in (one, many):
            storage.ensure_schema()
        properties = '\'{"spark.sql.adaptive.enabled":"true"}\'' if version < (22, 1) else None
        timings: dict[str, list[float]] = {}
        for label, storage in (("one node", one), ("cluster", many)):
            start = time.perf_counter()
            generate(storage, args.tasks, properties)
            if storage is one:
                storage.command("OPTIMIZE TABLE task_end FINAL")
            else:  # per shard (one replica; replication runs the merge on the others)
                for s in range(len(layout)):
                    with ServerStorage(
                        cluster.target("bench", s).model_copy(update={"cluster": None}), send_receive_timeout=600
                    ) as local:
                        try:
                            local.command("OPTIMIZE TABLE task_end_local FINAL")
                        except StorageError as exc:  # 18.16, Replicated: nothing left to merge
                            if "Unknown log entry type: 0" not in str(exc):
                                raise
                            print(
                                f"cluster bench: shard {s + 1}: OPTIMIZE FINAL had nothing to merge (18.16 says "
                                "'Unknown log entry type: 0')"
                            )
            n = int(storage.query("SELECT count() AS n FROM task_end_dedup")[0]["n"])
            print(f"cluster bench: {label}: generated {n:,} task rows in {time.perf_counter() - start:.1f} s")
            table = "task_end" if storage is one else "task_end_local"
            (disk,) = storage.query(
                "SELECT sum(bytes_on_disk) AS b, sum(rows) AS r FROM system.parts "
                f"WHERE active AND database = 'bench' AND table = '{table}'"
            )
            print(
                f"cluster bench: {label}: task_end on the server asked: {int(disk['r']):,} rows, "
                f"{int(disk['b']) / max(1, int(disk['r'])):.1f} bytes per row on disk"
            )
            ctx = SqlContext("bench", version)

            def timed(sql: str, storage: Any = storage) -> tuple[float, int]:
                return _timed(
                    storage, expand(interpolate(sql, variables), from_ms, to_ms, interval_ms=60_000), args.repeat
                )

            with_running, findings = timed(rule_query(None, ctx=ctx))
            cfg = GrafanaConfig(database="bench", clickhouse_version=version)
            worst = max((timed(alert_query(rule, cfg))[0], rule) for rule in RULE_IDS)
            timings[label] = [with_running, worst[0]]
            print(
                f"cluster bench: {label}: all rules, finished + running stages {with_running * 1000:.0f} ms "
                f"({findings} findings); slowest alert query "
                f"({worst[1]}) {worst[0] * 1000:.0f} ms"
            )
        names = ("all rules + running", "slowest alert query")
        for i, name in enumerate(names):
            print(f"cluster bench: {name}: cluster / one node x{timings['cluster'][i] / timings['one node'][i]:.2f}")
        one.close()
        many.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
