"""Options of the streaming source and sink: defaults, validation, clear errors (no Spark, no Kafka)."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from sparktap.collector.streaming.sink import SinkOptions
from sparktap.collector.streaming.source import KafkaRangePartition, KafkaStreamReader, SourceOptions, parse_duration_ms
from sparktap.errors import ConfigError
from sparktap.schemas.ddl import LATEST_VERSION
from sparktap.store.target import parse_storage_url

BASE = {"kafka.bootstrap.servers": "k1:9092,k2:9092", "subscribe": "sparktap.events"}


def test_source_defaults_follow_spark() -> None:
    o = SourceOptions.from_options(BASE)
    assert o.kafka_conf == {"bootstrap.servers": "k1:9092,k2:9092"}
    assert o.subscribe == ("sparktap.events",)
    assert o.starting == "latest"
    assert o.fail_on_data_loss is True
    assert o.max_trigger_delay_ms == 15 * 60_000
    assert o.max_offsets_per_trigger is None and o.min_offsets_per_trigger is None
    assert o.parse == "events" and o.probe_end_offsets is True
    assert o.poll_timeout_ms == 120_000


def test_source_options_are_case_insensitive_and_kafka_settings_pass_through() -> None:
    o = SourceOptions.from_options(
        {
            "kafka.bootstrap.servers": "k:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "SubscribePattern": "sparktap\\..*",
            "STARTINGOFFSETS": '{"t": {"0": -2, "1": 17}}',
            "maxOffsetsPerTrigger": "500",
            "minOffsetsPerTrigger": "50",
            "maxTriggerDelay": "30s",
            "minPartitions": "8",
            "failOnDataLoss": "false",
            "parse": "raw",
            "endOffsets": "watermark",
            "monitoringGroupId": "sparktap-lag",
        }
    )
    assert o.kafka_conf == {
        "bootstrap.servers": "k:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
    }
    assert o.pattern == "sparktap\\..*" and o.subscribe == ()
    assert o.starting == {("t", 0): -2, ("t", 1): 17}
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (500, 50, 30_000)
    assert o.min_partitions == 8 and o.fail_on_data_loss is False and o.parse == "raw"
    assert o.probe_end_offsets is False and o.monitoring_group == "sparktap-lag"


def test_assign_option() -> None:
    o = SourceOptions.from_options({"kafka.bootstrap.servers": "k:9092", "assign": '{"a": [1, 0], "b": [2]}'})
    assert o.assign == (("a", 0), ("a", 1), ("b", 2))


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"subscribe": "t"}, "needs option kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "k:9092"}, "exactly one of the options subscribe"),
        ({**BASE, "subscribePattern": "x"}, "exactly one of the options subscribe"),
        ({**BASE, "kafka.group.id": "g"}, "monitoringGroupId"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "startingOffsets instead"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "checkpoint holds the offsets"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, 'maxOffsetsPerTrigger="0" must be a positive integer'),
        ({**BASE, "minPartitions": "many"}, "minPartitions"),
        ({**BASE, "failOnDataLoss": "maybe"}, "must be true or false"),
        ({**BASE, "parse": "avro"}, "raw or events"),
        ({**BASE, "endOffsets": "guess"}, "probe or watermark"),
        ({**BASE, "maxTriggerDelay": "soon"}, "not a duration"),
        ({**BASE, "startingOffsets": '{"t": {"0": "x"}}'}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "k", "subscribePattern": "("}, "not a regular expression"),
        ({"kafka.bootstrap.servers": "k", "assign": "[0]"}, 'must be JSON like {"topic": [0, 1]}'),
    ],
)
def test_bad_source_options_fail_with_one_clear_line(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as failure:
        SourceOptions.from_options(options)
    assert fragment in str(failure.value)
    assert "\n" not in str(failure.value)


@pytest.mark.parametrize(
    ("text", "ms"), [("250", 250), ("100ms", 100), ("5s", 5000), ("5 sec", 5000), ("15m", 900_000), ("1h", 3_600_000)]
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text, "maxTriggerDelay") == ms


def test_default_read_limit_follows_the_options() -> None:
    def limit(**extra: str) -> object:
        return KafkaStreamReader(SourceOptions.from_options({**BASE, **extra})).getDefaultReadLimit()

    assert limit() == ReadAllAvailable()
    assert limit(maxOffsetsPerTrigger="5") == ReadMaxRows(5)
    assert limit(minOffsetsPerTrigger="7") == ReadMinRows(7)
    # both: the engine carries the maximum, the reader applies the minimum from its options
    assert limit(maxOffsetsPerTrigger="5", minOffsetsPerTrigger="2") == ReadMaxRows(5)


def test_reader_and_partitions_pickle_without_clients() -> None:
    reader = KafkaStreamReader(SourceOptions.from_options({**BASE, "maxOffsetsPerTrigger": "5"}))
    _ = reader.offsets  # a lazily made client must not travel to executors
    copy = pickle.loads(pickle.dumps(reader))  # noqa: S301 - our own object
    assert copy.options == reader.options and copy._reader is None
    part = pickle.loads(pickle.dumps(KafkaRangePartition("t", 3, 10, 20)))  # noqa: S301
    assert (part.topic, part.partition, part.start, part.end) == ("t", 3, 10, 20)
    reader.stop()


def test_sink_options() -> None:
    o = SinkOptions.from_options({"url": "chdb:///var/lib/st?database=spark", "checkpointLocation": "/chk/a"})
    assert o.sink_id == "/chk/a" and o.server_version == LATEST_VERSION and o.ensure_schema
    assert o.target.database == "spark"
    o = SinkOptions.from_options(
        {
            "url": "clickhouse://u:p@ch:9000/db",
            "sinkId": "nightly",
            "serverVersion": "18.16.1",
            "deadLetterTopic": "dlq",
            "kafka.bootstrap.servers": "k:9092",
        }
    )
    assert o.sink_id == "nightly" and o.server_version == (18, 16, 1)
    assert o.dead_letter_topic == "dlq" and o.kafka_conf == {"bootstrap.servers": "k:9092"}
    with pytest.raises(ConfigError, match="needs option url"):
        SinkOptions.from_options({})
    with pytest.raises(ConfigError, match="unsupported storage URL scheme"):
        SinkOptions.from_options({"url": "http://x"})
    with pytest.raises(ConfigError, match="needs kafka.bootstrap.servers too"):
        SinkOptions.from_options({"url": "chdb:///x", "deadLetterTopic": "dlq"})


@pytest.mark.parametrize(
    "url",
    [
        "chdb:///var/lib/sparktap/chdb?database=spark",
        "clickhouse://writer:p%40ss%2Fw0rd@ch.internal:9000/spark",
        "clickhouses://writer:pw@ch.internal:9440/spark?verify=false",
        "clickhouse://writer:pw@ch.internal:9000/spark?cluster=sparktap",
        "clickhouses://writer:pw@ch.internal:9440/spark?verify=false&cluster=two_shards",
    ],
)
def test_storage_url_round_trips(url: str) -> None:
    target = parse_storage_url(url)
    assert parse_storage_url(target.url()) == target


def test_a_failed_query_is_reported_as_our_one_line() -> None:
    from sparktap.collector.streaming.run import _first_line

    spark_text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] "
        "Failed when Python streaming data source perform latestOffset: Traceback (most recent call last):\n"
        '  File "source.py", line 338, in latestOffset\n'
        'sparktap.collector.streaming.offsets.DataLossError: offset of topic="t" partition=0 went back from 10 to 5: '
        "set the source option failOnDataLoss=false\n SQLSTATE: 38000"
    )
    assert _first_line(Exception(spark_text)) == (
        'offset of topic="t" partition=0 went back from 10 to 5: set the source option failOnDataLoss=false'
    )
    assert _first_line(Exception("[STREAM_FAILED] boom\n  at x")) == "[STREAM_FAILED] boom"
