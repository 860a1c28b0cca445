"""confluent-kafka plumbing of the streaming source: offset queries on the driver, range reads on executors.

No consumer group is ever joined (``assign()`` only): a group member waits for a rebalance before its first
assignment, and the Spark checkpoint, not Kafka, holds the offsets.

Latest offsets. Some Kafka-compatible brokers report a high watermark that stops short of the last record
batch (tansu lists the base offset of the last batch + 1), so in ``endOffsets=probe`` mode (the default) the
listed watermark is only where a check starts: a probe consumer is assigned at the listed watermark of every
partition and reads until librdkafka reports the end of each partition (the fetch response's own watermark,
checked by reading) or ``endOffsetProbeTimeoutMs`` passes; the latest offset is the highest of the listed
watermark and the offset after the last record seen. On Apache Kafka nothing exists past the watermark, so the
probe costs one empty fetch per broker per trigger; ``endOffsets=watermark`` skips it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sparktap.collector.streaming.offsets import (
    DataLossError,
    OffsetRange,
    Offsets,
    StreamingError,
    TopicPartition,
    below_target,
)

log = logging.getLogger("sparktap.collector.streaming")

_EARLIEST_TS = -2  # ListOffsets special timestamps
_LATEST_TS = -1
_OUT_OF_RANGE = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",  # an offset that is gone must surface, never be silently replaced
    "allow.auto.create.topics": False,
    "fetch.wait.max.ms": 100,
    "log_level": 3,
}


def consumer_config(
    kafka_conf: Mapping[str, str], group_id: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """librdkafka settings: our defaults, then the user's ``kafka.*`` options, then what this use needs."""
    conf: dict[str, Any] = {**CONSUMER_DEFAULTS, **kafka_conf, **(extra or {})}
    # librdkafka wants a group id even for assign(); this one is never joined and never committed to.
    conf["group.id"] = group_id or f"sparktap-stream-{uuid.uuid4().hex[:12]}"
    return conf


def describe(error: KafkaError | KafkaException | Exception) -> str:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return f"{type(error).__name__}: {error}"


class OffsetReader:
    """Driver-side view of the subscribed partitions and their offsets (one long-lived consumer, never joined)."""

    def __init__(
        self,
        kafka_conf: Mapping[str, str],
        *,
        probe: bool = True,
        probe_timeout: float = 2.0,
        request_timeout: float = 10.0,
        retries: int = 3,
        retry_interval: float = 1.0,
    ) -> None:
        self._conf = dict(kafka_conf)
        self.probe = probe
        self.probe_timeout = probe_timeout
        self.request_timeout = request_timeout
        self.retries = retries
        self.retry_interval = retry_interval
        self._consumer: Consumer | None = None

    @property
    def bootstrap(self) -> str:
        return str(self._conf.get("bootstrap.servers", "?"))

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self._conf))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):  # closing never fails a query
                pass
        self._consumer = None

    def _retrying(self, what: str, call: Any) -> Any:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return call()
            except (KafkaException, StreamingError) as exc:
                last = exc
                if attempt < self.retries:
                    time.sleep(self.retry_interval)
        raise StreamingError(
            f'cannot {what} bootstrap="{self.bootstrap}" after {self.retries + 1} attempts: '
            f"{describe(last) if last else '?'}; check that the brokers are up and kafka.bootstrap.servers"
        ) from last

    # -- metadata ---------------------------------------------------------------------------------------------

    def topics(self, names: Iterable[str] | None = None) -> dict[str, list[int]]:
        """Topics that exist -> their partition numbers: the ``names`` given, or every topic the brokers know
        (internal ones excluded)."""

        def call() -> dict[str, list[int]]:
            client = self._client()
            if names is None:
                found = client.list_topics(timeout=self.request_timeout).topics
            else:
                found = {}
                for name in names:
                    found.update(client.list_topics(topic=name, timeout=self.request_timeout).topics)
            return {
                name: sorted(topic.partitions)
                for name, topic in found.items()
                if topic.error is None and topic.partitions and not name.startswith("__")
            }

        result: dict[str, list[int]] = self._retrying("list topics", call)
        return result

    # -- offsets ----------------------------------------------------------------------------------------------

    def _list(self, partitions: Iterable[TopicPartition], timestamp: int, what: str) -> Offsets:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}

        def call() -> Offsets:
            found = self._client().offsets_for_times(
                [KafkaTopicPartition(t, p, timestamp) for t, p in wanted], timeout=self.request_timeout
            )
            out: Offsets = {}
            for tp in found:
                if tp.error is not None:
                    raise KafkaException(tp.error)
                out[(tp.topic, tp.partition)] = max(tp.offset, 0)
            return out

        result: Offsets = self._retrying(f"list the {what} offsets of {len(wanted)} partitions", call)
        return result

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self._list(partitions, _EARLIEST_TS, "earliest")

    def latest(self, partitions: Iterable[TopicPartition], enough: Offsets | None = None) -> Offsets:
        """The offset after the last record of every partition (listed watermark, then probed; see module doc).

        ``enough``: offsets the caller never reads past (Trigger.AvailableNow's target); a partition whose listed
        watermark already reaches its offset there is not probed, since a probe only ever raises the offset.
        """
        listed = self._list(partitions, _LATEST_TS, "latest")
        unsure = below_target(listed, enough)
        if not self.probe or not unsure:
            return listed
        return {**listed, **self._probe(unsure)}

    def _probe(self, listed: Offsets) -> Offsets:
        # A consumer that has fetched from a topic which then gets deleted can crash librdkafka 2.16 in its metadata
        # cache (seen on tansu), so the probe consumer lives for one probe only, like the executors' consumers.
        prober = Consumer(
            consumer_config(
                self._conf,
                extra={"fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 1 << 20, "fetch.wait.max.ms": 10},
            )
        )
        end = dict(listed)
        pending = set(listed)
        try:
            prober.assign([KafkaTopicPartition(t, p, off) for (t, p), off in listed.items()])
            deadline = time.monotonic() + self.probe_timeout
            while pending and (remaining := deadline - time.monotonic()) > 0:
                for msg in prober.consume(num_messages=10_000, timeout=min(remaining, 0.005)):
                    tp = (msg.topic() or "", msg.partition() or 0)
                    error = msg.error()
                    if error is None:
                        end[tp] = max(end[tp], (msg.offset() or 0) + 1)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        end[tp] = max(end[tp], msg.offset() or 0)
                        pending.discard(tp)
                    elif error.code() in _OUT_OF_RANGE:
                        pending.discard(tp)  # nothing at the listed watermark: it is the end
                    else:
                        log.debug("end-offset probe of %s: %s", tp, describe(error))
        finally:
            prober.close()
        if pending:
            log.debug("end-offset probe timed out for %d partitions; using what was read", len(pending))
        return end

    # -- monitoring -------------------------------------------------------------------------------------------

    def commit_to_group(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets to a consumer group for lag monitoring only; a failure is logged, never raised."""
        if not offsets:
            return
        consumer = Consumer(consumer_config(self._conf, group_id))
        try:
            consumer.commit(
                offsets=[KafkaTopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())], asynchronous=False
            )
        except KafkaException as exc:
            log.warning('cannot commit offsets to monitoring group="%s": %s', group_id, describe(exc))
        finally:
            consumer.close()


# ----------------------------------------------------------------------------------------------- executors


def data_loss(message: str, fail: bool) -> None:
    """Raise DataLossError, or log it when ``failOnDataLoss=false``."""
    if fail:
        raise DataLossError(
            f"{message}: data the query has not read is no longer in Kafka (retention, deleted records, or the "
            "topic was deleted and re-created); to let the query go on without it, set the source option "
            "failOnDataLoss=false"
        )
    log.warning("%s; failOnDataLoss=false: continuing without it", message)


def read_messages(
    kafka_conf: Mapping[str, str], rng: OffsetRange, *, fail_on_data_loss: bool, poll_timeout: float
) -> Iterator[list[Message]]:
    """Exactly the records of ``rng`` ([start, end)), in offset order, as lists of consumed messages (each a chunk
    librdkafka returned, or the part of it inside the range): the Arrow batch is built column by column from them
    (``parser.message_batches``), with no Python object per record.

    Offsets with no record (compacted away, transaction markers, aborted records) are gaps, not loss; a gap is
    loss only when the partition's earliest offset has moved past it. Loss and out-of-range offsets raise
    DataLossError, or are logged and skipped with ``fail_on_data_loss=False``. No progress for
    ``poll_timeout`` seconds raises StreamingError (or ends the range, logged, without failOnDataLoss).
    """
    # One consumer per range, closed at the end: reusing consumers across tasks saves little, and a consumer that
    # has fetched from a topic which then gets deleted can crash librdkafka 2.16 (see OffsetReader._probe).
    consumer = Consumer(consumer_config(kafka_conf))
    try:
        yield from _read(consumer, rng, fail_on_data_loss, poll_timeout)
    finally:
        consumer.close()


class _Position:
    """Where a range read is: the next offset expected, and when the partition's earliest offset was last asked."""

    def __init__(self, consumer: Consumer, rng: OffsetRange) -> None:
        self.consumer = consumer
        self.rng = rng
        self.expected = rng.start
        self.last_progress = time.monotonic()
        self._low_checked: tuple[float, int] | None = None

    def earliest(self) -> int:
        now = time.monotonic()
        if self._low_checked is None or now - self._low_checked[0] > 1.0:
            low, _high = self.consumer.get_watermark_offsets(
                KafkaTopicPartition(self.rng.topic, self.rng.partition), timeout=10.0, cached=False
            )
            self._low_checked = (now, low)
        return self._low_checked[1]


def _read(consumer: Consumer, rng: OffsetRange, fail: bool, poll_timeout: float) -> Iterator[list[Message]]:
    where = f'topic="{rng.topic}" partition={rng.partition}'
    end = rng.end
    at = _Position(consumer, rng)
    consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, at.expected)])
    while at.expected < end:
        msgs = consumer.consume(num_messages=max(1, min(10_000, end - at.expected)), timeout=0.1)
        if not msgs:
            if time.monotonic() - at.last_progress > poll_timeout:
                message = (
                    f"no record of {where} at offset {at.expected} after {poll_timeout:g}s "
                    f"(reading offsets {rng.start}..{end - 1})"
                )
                if fail:
                    raise StreamingError(
                        f"{message}: the broker did not return offsets it listed as available; check the broker, "
                        "or raise the source option kafkaConsumer.pollTimeoutMs"
                    )
                log.warning("%s; failOnDataLoss=false: skipping the rest of this range", message)
                return
            continue
        # the common chunk: no error, and exactly the next offsets of the range (one partition is assigned, so
        # its offsets increase: first == expected and last - first == count - 1 means no gap), taken whole
        first, last = msgs[0].offset(), msgs[-1].offset()
        if (
            first == at.expected
            and first is not None
            and last is not None
            and last < end
            and last - first == len(msgs) - 1
            and not any(map(Message.error, msgs))
        ):
            at.expected = last + 1
            at.last_progress = time.monotonic()
            yield msgs
            continue
        taken = _one_by_one(msgs, at, fail, where)
        if taken:
            yield taken


def _one_by_one(msgs: list[Message], at: _Position, fail: bool, where: str) -> list[Message]:
    """The messages of a chunk that are the range's next records, judged one by one (errors, gaps, the end)."""
    rng, end = at.rng, at.rng.end
    taken: list[Message] = []
    for msg in msgs:
        error = msg.error()
        if error is not None:
            code = error.code()
            if code == KafkaError._PARTITION_EOF:
                if (msg.offset() or 0) >= end:  # the rest of the range holds no records (markers, gaps)
                    at.expected = end
                    break
                continue
            if code in _OUT_OF_RANGE:
                at.expected = _out_of_range(at.consumer, rng, at.expected, fail)
                at.last_progress = time.monotonic()
                break
            if error.fatal():
                raise StreamingError(f"cannot read {where}: {describe(error)}")
            log.debug("reading %s: %s", where, describe(error))
            continue
        offset = msg.offset() or 0
        if offset < at.expected:
            continue
        if offset >= end:
            at.expected = end
            break
        if offset > at.expected:
            low = at.earliest()
            if low > at.expected:
                data_loss(f"offsets {at.expected}..{min(low, offset) - 1} of {where} are gone", fail)
        taken.append(msg)
        at.expected = offset + 1
        at.last_progress = time.monotonic()
    return taken


def _out_of_range(consumer: Consumer, rng: OffsetRange, expected: int, fail: bool) -> int:
    """The offset to go on from after the broker said ``expected`` is out of range (or raise)."""
    where = f'topic="{rng.topic}" partition={rng.partition}'
    low, high = consumer.get_watermark_offsets(KafkaTopicPartition(rng.topic, rng.partition), timeout=10.0)
    if expected < low:
        data_loss(f"offsets {expected}..{min(low, rng.end) - 1} of {where} are gone (earliest is now {low})", fail)
        resume = min(low, rng.end)
    else:
        data_loss(
            f"offset {expected} of {where} is beyond the end of the partition ({high}): was the topic deleted "
            "and re-created?",
            fail,
        )
        resume = rng.end
    if resume < rng.end:
        consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, resume)])
    return resume
