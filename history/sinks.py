"""Where imported events go: the Kafka topic (the collector then stores them as live ones), or straight into
ClickHouse through the collector's own decoder and storage insert (the rows are the live path's rows).

Both say whether an application attempt is already stored by the live listener (``stored_live``): a live attempt
has ``listener_health`` events, which the log cannot give (the import never makes one), and its ``seq`` numbering
counts them, so the import skips the attempt rather than add a second, differently numbered copy (docs/import.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sparktap.collector.decode import Decoder
from sparktap.collector.writer import prepare_storage
from sparktap.errors import ConfigError, ServiceError
from sparktap.store import Storage, StorageError, open_storage, parse_storage_url

BATCH_EVENTS = 50_000
BATCH_BYTES = 32 << 20
"""A sink delivers what it holds once it holds this many events or bytes of them (and when flushed): the events of
many small logs go in one insert per table, and a large log's in several."""


class Sink(Protocol):
    name: str
    sent: int
    """events handed to ``send`` so far"""
    confirmed: int
    """of those, how many the destination confirmed stored (the first ``confirmed`` sent): a log whose last event
    is among them may be checkpointed"""
    batches: int
    """deliveries so far (a ClickHouse batch: one insert per table it has rows for; Kafka: a producer flush)"""
    inserts: int
    """ClickHouse inserts so far (0 for Kafka)"""

    def send(self, app_id: str, value: bytes) -> None:
        """Hold or deliver one event (delivers what it holds once over its budget: ServiceError when it cannot)."""

    def flush(self) -> None:
        """Deliver everything sent so far (ServiceError when it cannot)."""

    def discard(self) -> None:
        """Drop what is held and not delivered (the run failed: its logs are not checkpointed, and sent again)."""

    def rejected(self) -> dict[str, int]:
        """Events refused so far, by reason."""

    def close(self) -> None: ...


class LiveCheck:
    """Asks a storage whether an attempt was stored by the live listener (it has listener_health rows)."""

    def __init__(self, storage: Storage, view: str) -> None:
        """``view``: the qualified ``_dedup`` view of the listener_health table."""
        self.storage = storage
        self.view = view
        self._cache: dict[tuple[str, str], bool] = {}

    @classmethod
    def open(cls, url: str, retention_days: int) -> LiveCheck:
        storage = _open(url)
        schema = _prepare(storage, retention_days)
        return cls(storage, _health_view(schema))

    @classmethod
    def from_settings(cls, retention_days: int) -> LiveCheck:
        """The collector's own ClickHouse (SPARKTAP_CLICKHOUSE__*: URL, database, TLS), as the Helm follower uses."""
        from sparktap.store.settings import load_store_settings

        try:
            storage = open_storage(load_store_settings().clickhouse.target())
        except ValueError as exc:
            raise ConfigError(f"the ClickHouse settings (SPARKTAP_CLICKHOUSE__*) are invalid: {exc}") from None
        schema = _prepare(storage, retention_days)
        return cls(storage, _health_view(schema))

    def stored_live(self, app_id: str, app_attempt: str) -> bool:
        key = (app_id, app_attempt)
        if key not in self._cache:
            rows = self.storage.query(
                f"SELECT count() AS n FROM {self.view} "  # noqa: S608 - our identifier, quoted values
                f"WHERE app_id = {_quote(app_id)} AND app_attempt = {_quote(app_attempt)}"
            )
            self._cache[key] = bool(rows and int(rows[0]["n"]) > 0)
        return self._cache[key]


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _health_view(schema: Any) -> str:
    for spec in schema.tables.values():
        if spec.event_type == "listener_health":
            return str(schema.qualified(spec.dedup_view))
    raise ConfigError('the storage schema has no table for event_type="listener_health"')


def _open(url: str) -> Storage:
    try:
        return open_storage(parse_storage_url(url))
    except ValueError as exc:
        raise ConfigError(f"--storage-url is invalid: {exc}") from None


def _prepare(storage: Storage, retention_days: int) -> Any:
    try:
        return prepare_storage(storage, retention_days, plain_copy=False)
    except StorageError as exc:
        raise ServiceError(f"cannot prepare the ClickHouse schema: {exc}") from None


class StorageSink:
    """Decoded by the collector's Decoder, inserted by the storage's insert_columns, in batches."""

    def __init__(self, url: str, retention_days: int, batch_bytes: int = BATCH_BYTES) -> None:
        self.name = "ClickHouse"
        self.batch_bytes = batch_bytes
        self.storage = _open(url)
        schema = _prepare(self.storage, retention_days)
        self.decoder = Decoder(schema, arrow=self.storage.target.capabilities.embedded)  # Arrow columns as they are
        self.live = LiveCheck(self.storage, _health_view(schema))
        self._values: list[bytes] = []
        self._bytes = 0
        self._rejected: dict[str, int] = {}
        self.sent = self.confirmed = self.batches = self.inserts = 0
        self._failed = False

    def send(self, app_id: str, value: bytes) -> None:
        self._values.append(value)
        self._bytes += len(value)
        self.sent += 1
        if len(self._values) >= BATCH_EVENTS or self._bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._values:
            return
        values, self._values, self._bytes = self._values, [], 0
        decoded = self.decoder.decode(values)
        for reject in decoded.rejects:
            self._rejected[reject.reason] = self._rejected.get(reject.reason, 0) + 1
        for table, chunk in decoded.tables.items():
            try:
                self.storage.insert_columns(table, chunk.columns)
            except StorageError as exc:
                self._failed = True  # these events are lost: nothing sent before now counts as stored again
                raise ServiceError(f'cannot insert into ClickHouse table="{table}": {exc}') from None
            self.inserts += 1
        self.batches += 1
        if not self._failed:
            self.confirmed = self.sent

    def discard(self) -> None:
        self._values, self._bytes = [], 0
        self._failed = False
        self.confirmed = self.sent

    def rejected(self) -> dict[str, int]:
        return dict(self._rejected)

    def close(self) -> None:
        self.storage.close()


class KafkaSink:
    """The live relay's producer settings (idempotent, acks=all, zstd), key = app_id, as the listener produces."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        extra: Mapping[str, str],
        live: LiveCheck | None,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        from confluent_kafka import Producer

        self.batch_bytes = batch_bytes
        self.name = f"Kafka topic {topic}"
        conf: dict[str, Any] = {
            "client.id": "sparktap-import",
            "compression.type": "zstd",
            "linger.ms": "100",
            "message.timeout.ms": "120000",
            "queue.buffering.max.kbytes": "262144",
            **extra,
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "acks": "all",
        }
        self.topic = topic
        self.producer = Producer(conf)
        self.live = live
        self._rejected: dict[str, int] = {}
        self.sent = self.confirmed = self.batches = self.inserts = 0
        self._bytes = 0

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            reason = f"Kafka refused the event: {err.str()}"
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    def send(self, app_id: str, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, app_id.encode(), on_delivery=self._delivered)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.sent += 1
        self._bytes += len(value)
        if self._bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        """Wait until the brokers acknowledged every event produced (acks=all): only then are they confirmed."""
        if self.confirmed == self.sent:
            return
        sent = self.sent
        left = self.producer.flush(120)
        if left:
            raise ServiceError(
                f"{left} events were not delivered to Kafka within 120 s: check the brokers "
                "(--bootstrap-servers) and run the import again (it resumes from its checkpoint)"
            )
        self._bytes = 0
        self.batches += 1
        self.confirmed = sent

    def discard(self) -> None:
        """Events produced stay with the producer (delivered or not: their logs are sent again, deduplicated)."""
        self._bytes = 0

    def rejected(self) -> dict[str, int]:
        return dict(self._rejected)

    def close(self) -> None:
        self.producer.flush(10)
