"""Executor-side writes of the Spark engine into a ClickHouse server (issue 17), on real Spark local[2], Apache
Kafka and the Debian ClickHouse 18.16: each task writes its own rows, the driver's commit carries counts only,
and ``sparktap collect --engine spark`` killed mid-stream and restarted stores every message exactly once.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark import cloudpickle

from sparktap.collector.streaming import data_source_workers, register
from sparktap.collector.streaming.executor import WrittenMessage
from sparktap.collector.streaming.sink import ClickHouseSink, ClickHouseStreamWriter
from sparktap.local.ports import wait_until
from sparktap.store import Storage, open_storage
from sparktap.store.target import parse_storage_url
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.cluster import on_node
from tests.support.streaming import count, events, kafka_topic_named, ledger, produce

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
    from pyspark.sql.types import StructType

pytestmark = pytest.mark.integration

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the recording sink below runs in Spark's workers


class _RecordingWriter(ClickHouseStreamWriter):
    """The sink's writer, and the driver's commit appends the messages it got to a file first."""

    record_to = ""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        with open(self.record_to, "ab") as out:
            out.write(pickle.dumps((batchId, messages)) + b"\n--\n")
        super().commit(messages, batchId)


class _RecordingSink(ClickHouseSink):
    @classmethod
    def name(cls) -> str:
        return "sparktap-clickhouse-recording"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, ClickHouseStreamWriter)
        recording = _RecordingWriter(writer.options, schema, writer.version)
        recording.record_to = str(self.options["recordTo"])
        return recording


def _recorded(path: Path) -> list[tuple[int, list[Any]]]:
    return [pickle.loads(chunk) for chunk in path.read_bytes().split(b"\n--\n") if chunk]  # noqa: S301 - ours


def _source(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    return (
        spark.readStream.format("sparktap-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("parse", "raw")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )


def test_tasks_write_their_rows_and_the_commit_message_carries_counts_only(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    server_storage: Storage,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    dlq = f"{topic}.dlq"
    kafka_topic_named(bootstrap, dlq)
    messages: list[tuple[bytes | None, bytes]] = list(events(40, apps=2, event_type="stage_completed"))
    messages.insert(10, (b"app-1", b"{not json"))
    produce(bootstrap, topic, messages)
    register(spark)
    with data_source_workers(spark):  # as register() does: this interpreter for the workers
        spark.dataSource.register(_RecordingSink)
    record = tmp_path / "commits.bin"
    checkpoint = tmp_path / "chk"
    query = (
        _source(spark, bootstrap, topic, 20)
        .writeStream.format("sparktap-clickhouse-recording")
        .option("url", server_storage.target.url())
        .option("recordTo", str(record))
        .option("deadLetterTopic", dlq)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)

    assert count(server_storage, "stage_completed") == 40
    committed = ledger(server_storage)
    assert [b for b, _ in committed] == [0, 1, 2] and sum(rows for _, rows in committed) == 40
    recorded = _recorded(record)
    assert [batch for batch, _ in recorded] == [0, 1, 2]
    for batch, batch_messages in recorded:
        # one message per task (one task per Kafka partition with records in the batch), each only counts and ids
        assert 1 <= len(batch_messages) <= 2
        assert sorted(m.partition for m in batch_messages) == list(range(len(batch_messages)))
        for message in batch_messages:
            assert type(message) is WrittenMessage
            assert set(vars(message)) == {
                "batch_id",
                "partition",
                "attempt",
                "rows",
                "tables",
                "dead_letters",
                "skipped",
            }
            assert message.batch_id == batch and message.attempt == 0 and message.skipped is False
            assert message.tables == ({"stage_completed": message.rows} if message.rows else {})
            assert len(pickle.dumps(message)) < 400  # whatever the rows: no row data travels to the driver
        assert sum(m.rows for m in batch_messages) == dict(committed)[batch]
    assert sum(m.dead_letters for _, ms in recorded for m in ms) == 1
    (letter,) = consume_all(bootstrap, dlq, expected=1, timeout=10)  # sent by the task that read it
    assert letter.value == b"{not json"

    # the last batch replayed (Spark died after the sink's commit, before its commit log): every task sees the
    # ledger, writes nothing and says so; the commit skips it
    from tests.support.streaming import drop_last_commit

    assert drop_last_commit(checkpoint) == 2
    record.unlink()
    query = (
        _source(spark, bootstrap, topic, 20)
        .writeStream.format("sparktap-clickhouse-recording")
        .option("url", server_storage.target.url())
        .option("recordTo", str(record))
        .option("deadLetterTopic", dlq)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    ((batch, replay),) = _recorded(record)
    assert batch == 2 and replay and all(m.skipped and m.rows == 0 and m.tables == {} for m in replay)
    assert count(server_storage, "stage_completed") == 40  # the table itself: the replay wrote nothing
    assert ledger(server_storage) == committed
    assert len(consume_all(bootstrap, dlq, expected=2, timeout=5)) == 1  # its dead letter not sent again


@pytest.fixture
def sink_storage(request: pytest.FixtureRequest) -> Iterator[Storage]:
    """The ``clickhouse_cluster`` (2 shards, the second with 2 replicas): the kill-and-restart case runs there only.
    The sink's exactly-once rests on its ledger, the same on one server, where the test above replays a committed
    batch and test_streaming_pipeline stops and restarts the stream (on chDB); a cluster adds the distributed insert
    and the replicas to what a kill can cut."""
    cluster = request.getfixturevalue("clickhouse_cluster")
    storage = open_storage(
        parse_storage_url(cluster.url(request.getfixturevalue("cluster_database"))), send_receive_timeout=120
    )
    try:
        yield storage
    finally:
        storage.close()


@pytest.fixture
def killable() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes started in their own session; whatever is left of them is killed at the end of the test."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_collect_engine_spark_killed_mid_stream_and_restarted_stores_every_message_exactly_once(
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    sink_storage: Storage,
    tmp_path: Path,
    killable: list[subprocess.Popen[str]],
    request: pytest.FixtureRequest,
) -> None:
    """``sparktap collect --engine spark`` into a ClickHouse cluster, SIGKILLed (with its JVM and Python
    workers) while batches are being written, then restarted from its checkpoint."""
    server_storage = sink_storage
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=3)
    total = 3000
    produce(bootstrap, topic, events(total, apps=5))
    checkpoint = tmp_path / "chk"
    env = {
        **os.environ,
        "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "SPARKTAP_KAFKA__TOPIC": topic,
        "SPARKTAP_CLICKHOUSE__URL": server_storage.target.url(),
    }
    command = [
        sys.executable,
        "-m",
        "sparktap",
        "collect",
        "--engine",
        "spark",
        "--master",
        "local[2]",
        "--checkpoint",
        str(checkpoint),
    ]
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen(
            [*command, "--max-offsets-per-trigger", "150"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,  # noqa: S603
            start_new_session=True,
        )
    killable.append(first)

    def batches() -> int:
        try:
            return len(ledger(server_storage))
        except Exception:  # noqa: BLE001 - the ledger table does not exist yet
            return 0

    wait_until(lambda: batches() >= 3 or first.poll() is not None, 240, "three committed micro-batches")
    assert first.poll() is None, log.read_text()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers, mid-stream
    first.wait(30)
    before = batches()
    assert before < total // 150  # killed mid-stream: batches were left to do

    # the batch cut by the kill is planned again from the checkpoint's offset log (its 150 offsets); the rest of the
    # backlog in larger batches: the restart's exactly-once is the point, not the rate limit (test_streaming_source)
    second = subprocess.run(
        [*command, "--max-offsets-per-trigger", "1000", "--trigger", "available-now"],
        env=env,
        capture_output=True,
        text=True,  # noqa: S603
        timeout=400,
        check=False,
    )
    assert second.returncode == 0, second.stderr[-3000:]

    # every message exactly once: distinct event keys, and rows through the deduplicating view
    (row,) = server_storage.query("SELECT uniqExact(app_id, app_attempt, seq) AS n FROM task_end")
    assert row["n"] == total
    assert count(server_storage, "task_end_dedup") == total
    committed = ledger(server_storage)
    assert [b for b, _ in committed] == list(range(len(committed)))  # every batch recorded once, none skipped
    # the command's last line: the batches this run committed, by the ledger
    assert (
        second.stdout.splitlines()[-1]
        == f"committed {len(committed) - before} micro-batch(es); checkpoint: {checkpoint}"
    )
    assert sum(rows for _, rows in committed) == total
    # the table itself may hold second copies of a batch re-run after the kill, until ClickHouse merges them
    assert count(server_storage, "task_end") >= total
    # on each shard's leader replica (18.16 fails OPTIMIZE forwarded from another replica: "Unknown log entry type");
    # the other replica fetches the merged part
    database = server_storage.database
    for node in request.getfixturevalue("clickhouse_cluster").all_nodes():
        leader = on_node(
            node,
            database,
            f"SELECT is_leader FROM system.replicas WHERE database = '{database}' AND table = 'task_end_local'",
        )
        if leader == [(1,)]:
            on_node(node, database, "OPTIMIZE TABLE task_end_local FINAL")
    wait_until(lambda: count(server_storage, "task_end") <= total, 60, "the merges after OPTIMIZE FINAL")
    assert count(server_storage, "task_end") == total
