"""The ``sparktap-kafka`` streaming source: PySpark's Python Data Source API, Spark's Kafka source semantics.

>>> df = (spark.readStream.format("sparktap-kafka")
...       .option("kafka.bootstrap.servers", "broker:9092").option("subscribe", "sparktap.events")
...       .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100_000).load())

Offsets are Spark's Kafka checkpoint format (``{"topic": {"partition": offset}}``). See docs/streaming.md for
every option; the offset arithmetic is in ``offsets.py`` and the Kafka plumbing in ``kafka.py``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from sparktap.collector.streaming import kafka
from sparktap.collector.streaming.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    StartingOffsets,
    StreamingError,
    TopicPartition,
    backlog,
    limit_offsets,
    offsets_from_json,
    offsets_text,
    offsets_to_json,
    parse_starting_offsets,
    split_ranges,
)
from sparktap.collector.streaming.parser import Parse, message_batches, spark_schema
from sparktap.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger("sparktap.collector.streaming")

SOURCE_FORMAT = "sparktap-kafka"

# kafka.* settings the source must own: offsets come from the checkpoint, never from a group or a reset policy.
_FORBIDDEN_KAFKA = {
    "group.id": "the source never joins a consumer group; set monitoringGroupId to commit offsets for monitoring",
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the Spark checkpoint holds the offsets",
    "enable.partition.eof": "the source needs end-of-partition events",
    "key.deserializer": "records are returned as bytes",
    "value.deserializer": "records are returned as bytes",
    "interceptor.classes": "not supported",
}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNITS_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, option: str) -> int:
    """Spark's duration strings: ``100ms``, ``5s``, ``15m``, ``1h``; a bare number is milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise ConfigError(f'option {option}="{text}" is not a duration: use e.g. 500ms, 5s, 15m')
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _UNITS_MS[unit]


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one source (picklable: it travels to executors with the reader)."""

    kafka_conf: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: StartingOffsets = "latest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    parse: Parse = "events"
    probe_end_offsets: bool = True
    probe_timeout_ms: int = 2000
    poll_timeout_ms: int = 120_000
    fetch_retries: int = 3
    fetch_retry_interval_ms: int = 1000
    monitoring_group: str | None = None
    arrow_batch_rows: int = 10_000

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        kafka_conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        if not kafka_conf.get("bootstrap.servers"):
            raise ConfigError(
                f'source "{SOURCE_FORMAT}" needs option kafka.bootstrap.servers, e.g. '
                '.option("kafka.bootstrap.servers", "broker:9092")'
            )
        for key, why in _FORBIDDEN_KAFKA.items():
            if key in kafka_conf:
                raise ConfigError(f'source "{SOURCE_FORMAT}" does not accept option kafka.{key}: {why}')
        chosen = [name for name in ("subscribe", "subscribepattern", "assign") if opts.get(name, "").strip()]
        if len(chosen) != 1:
            raise ConfigError(
                f'source "{SOURCE_FORMAT}" needs exactly one of the options subscribe (topics, comma-separated), '
                f"subscribePattern (a regular expression) or assign (JSON), got {chosen or 'none'}"
            )
        subscribe = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        pattern = opts.get("subscribepattern", "").strip() or None
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f'option subscribePattern="{pattern}" is not a regular expression: {exc}') from exc
        assign: tuple[TopicPartition, ...] = ()
        if "assign" in chosen:
            assign = _parse_assign(opts["assign"])
        parse = opts.get("parse", "events").strip().lower()
        if parse not in ("raw", "events"):
            raise ConfigError(f'option parse="{parse}" must be raw or events')
        end_offsets = opts.get("endoffsets", "probe").strip().lower()
        if end_offsets not in ("probe", "watermark"):
            raise ConfigError(f'option endOffsets="{end_offsets}" must be probe or watermark')
        return cls(
            kafka_conf=kafka_conf,
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            starting=_starting(opts.get("startingoffsets")),
            max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            min_offsets_per_trigger=_positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger"),
            max_trigger_delay_ms=parse_duration_ms(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay"),
            min_partitions=_positive(opts, "minpartitions", "minPartitions"),
            max_records_per_partition=_positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
            fail_on_data_loss=_boolean(opts, "failondataloss", "failOnDataLoss", True),
            parse=cast(Parse, parse),
            probe_end_offsets=end_offsets == "probe",
            probe_timeout_ms=_positive(opts, "endoffsetprobetimeoutms", "endOffsetProbeTimeoutMs") or 2000,
            poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs") or 120_000,
            fetch_retries=_non_negative(opts, "fetchoffset.numretries", "fetchOffset.numRetries", 3),
            fetch_retry_interval_ms=_non_negative(
                opts, "fetchoffset.retryintervalms", "fetchOffset.retryIntervalMs", 1000
            ),
            monitoring_group=opts.get("monitoringgroupid", "").strip() or None,
        )


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    import json

    try:
        obj = json.loads(text)
        parts = [(str(topic), int(p)) for topic, partitions in obj.items() for p in partitions]
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f'option assign="{text}" must be JSON like {{"topic": [0, 1]}}: {exc}') from exc
    return tuple(sorted(set(parts)))


def _starting(text: str | None) -> StartingOffsets:
    try:
        return parse_starting_offsets(text)
    except StreamingError as exc:
        raise ConfigError(str(exc)) from exc


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts or not opts[key].strip():
        return None
    try:
        value = int(opts[key])
    except ValueError as exc:
        raise ConfigError(f'option {name}="{opts[key]}" must be a positive integer') from exc
    if value < 1:
        raise ConfigError(f'option {name}="{opts[key]}" must be a positive integer')
    return value


def _non_negative(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    try:
        value = int(opts.get(key, default))
    except ValueError as exc:
        raise ConfigError(f'option {name}="{opts[key]}" must be an integer >= 0') from exc
    if value < 0:
        raise ConfigError(f'option {name}="{opts[key]}" must be an integer >= 0')
    return value


def _boolean(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f'option {name}="{raw}" must be true or false')


class KafkaRangePartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaRangePartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: offsets and planning (in Spark's long-lived source worker); executor side: ``read``.

    The instance is pickled to executors with every batch plan, so Kafka clients are created lazily and never
    pickled.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._reader: kafka.OffsetReader | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: offsets not to go past
        self._latest: Offsets | None = None
        self._last_trigger = 0.0  # as in Spark: the first batch never waits for minOffsetsPerTrigger
        self._reported: set[str] = set()
        self._monitored: Offsets = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    # -- Kafka ------------------------------------------------------------------------------------------------

    @property
    def offsets(self) -> kafka.OffsetReader:
        if self._reader is None:
            o = self.options
            self._reader = kafka.OffsetReader(
                o.kafka_conf,
                probe=o.probe_end_offsets,
                probe_timeout=o.probe_timeout_ms / 1000,
                retries=o.fetch_retries,
                retry_interval=o.fetch_retry_interval_ms / 1000,
            )
        return self._reader

    def _partitions(self) -> set[TopicPartition]:
        """The topic-partitions subscribed to, as the brokers know them now."""
        o = self.options
        if o.pattern is not None:
            topics = self.offsets.topics()
        else:
            topics = self.offsets.topics(sorted({t for t, _ in o.assign} if o.assign else set(o.subscribe)))
        if o.assign:
            return {tp for tp in o.assign if tp[1] in topics.get(tp[0], ())}
        if o.pattern is not None:
            names = [t for t in topics if re.fullmatch(o.pattern, t)]
        else:
            names = [t for t in o.subscribe if t in topics]
        return {(t, p) for t in names for p in topics[t]}

    def _data_loss(self, message: str) -> None:
        """Raise, or log once per distinct message with failOnDataLoss=false."""
        if not self.options.fail_on_data_loss and message in self._reported:
            return
        self._reported.add(message)
        kafka.data_loss(message, self.options.fail_on_data_loss)

    # -- offsets ----------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's method name
        current = self._partitions()
        starting = self.options.starting
        if starting == "earliest":
            offsets = self.offsets.earliest(current)
        elif starting == "latest":
            offsets = self.offsets.latest(current)
        else:
            given = starting
            if self.options.pattern is None and set(given) != current:
                missing = sorted(current - set(given))
                unknown = sorted(set(given) - current)
                raise ConfigError(
                    "option startingOffsets must give every subscribed partition (-2 = earliest, -1 = latest): "
                    f"missing {missing}, not found in Kafka {unknown}"
                )
            earliest = self.offsets.earliest(
                [tp for tp, off in given.items() if off == EARLIEST] + sorted(current - set(given))
            )
            latest = self.offsets.latest([tp for tp, off in given.items() if off == LATEST])
            offsets = {tp: earliest.get(tp, 0) for tp in current}
            for tp, off in given.items():
                if tp in current:
                    offsets[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return offsets_to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        current = self._partitions()
        self._target = self.offsets.latest(current)
        log.info("Trigger.AvailableNow: reading up to %s", offsets_text(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        o = self.options
        begin = offsets_from_json(start, "the start offset in the checkpoint")
        self._monitor(begin)  # everything before the start of a new batch has been committed by Spark
        current = self._partitions()
        gone = sorted(set(begin) - current)
        if gone:
            self._data_loss(f"partitions {_names(gone)} are gone: was the topic deleted, or did it shrink?")
        new = sorted(current - set(begin))
        begin = {tp: off for tp, off in begin.items() if tp in current}
        if new:
            begin.update(self.offsets.earliest(new))
        latest = self.offsets.latest(current, enough=self._target)  # AvailableNow: no probe once at the target
        self._latest = latest
        for tp in sorted(current & set(begin)):
            if latest[tp] < begin[tp]:
                self._data_loss(
                    f'offset of topic="{tp[0]}" partition={tp[1]} went back from {begin[tp]} to {latest[tp]}'
                )
        upper = dict(latest)
        if self._target is not None:  # AvailableNow: nothing beyond the target; partitions born later wait
            upper = {tp: self._capped(tp, off, begin[tp]) for tp, off in latest.items()}

        if isinstance(limit, ReadAllAvailable):
            end = upper
        else:
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else o.min_offsets_per_trigger
            if min_rows is not None and self._target is None and self._should_wait(begin, upper, min_rows):
                return start
            end = limit_offsets(begin, upper, max_rows) if max_rows is not None else upper
        result = offsets_to_json(end)
        if result != start:
            self._last_trigger = time.time()
        return result

    def _capped(self, tp: TopicPartition, latest: int, first: int) -> int:
        """The end of a partition under Trigger.AvailableNow's target."""
        assert self._target is not None  # noqa: S101 - only called with a target
        if latest < first:  # went back: already reported as data loss
            return latest
        if tp not in self._target:
            return first
        return max(first, min(latest, self._target[tp]))

    def _should_wait(self, begin: Offsets, upper: Offsets, min_rows: int) -> bool:
        """minOffsetsPerTrigger: wait while fewer records are available, unless maxTriggerDelay has passed."""
        if (time.time() - self._last_trigger) * 1000 >= self.options.max_trigger_delay_ms:
            return False
        return sum(backlog(begin, upper).values()) < min_rows

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        o = self.options
        begin = offsets_from_json(start, "the start offset in the checkpoint")
        until = offsets_from_json(end, "the end offset in the checkpoint")
        new = [tp for tp in until if tp not in begin]
        earliest = self.offsets.earliest(new) if new else {}
        ranges = []
        for tp, stop in until.items():
            first = begin[tp] if tp in begin else earliest.get(tp, 0)
            if stop < first:
                self._data_loss(f'offset of topic="{tp[0]}" partition={tp[1]} went back from {first} to {stop}')
                continue
            ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        pieces = split_ranges(sorted(ranges), o.min_partitions, o.max_records_per_partition)
        return [KafkaRangePartition(p.topic, p.partition, p.start, p.end) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        o = self.options
        part = cast(KafkaRangePartition, partition)
        chunks = kafka.read_messages(
            o.kafka_conf,
            OffsetRange(part.topic, part.partition, part.start, part.end),
            fail_on_data_loss=o.fail_on_data_loss,
            poll_timeout=o.poll_timeout_ms / 1000,
        )
        return message_batches(chunks, part.topic, part.partition, o.parse, o.arrow_batch_rows)

    def commit(self, end: dict) -> None:
        self._monitor(offsets_from_json(end, "the committed offset"))

    def _monitor(self, done: Offsets) -> None:
        """Commit processed offsets to the monitoring group, if any (for lag dashboards; never read back)."""
        group = self.options.monitoring_group
        if group and done != self._monitored:
            self.offsets.commit_to_group(group, done)
            self._monitored = done

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _names(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


class KafkaSource(DataSource):
    """``spark.readStream.format("sparktap-kafka")``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(cast(Any, options))
        self.source_options = SourceOptions.from_options(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_FORMAT

    def schema(self) -> StructType:
        return spark_schema(self.source_options.parse)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return KafkaStreamReader(self.source_options)
