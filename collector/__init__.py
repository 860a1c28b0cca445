"""sparktap.collector: Kafka -> ClickHouse.

The consumer-group service (``sparktap collect``, docs/collector.md): ``consumer.py`` (the service's lifecycle and
loop) on ``core.py`` (shared state, waiting), ``batching.py`` (consume -> batch -> insert, the byte budget),
``rebalance.py`` (commits, rebalances) and ``service_state.py`` (health and metrics); ``memory.py`` (the documented
memory bound), ``decode.py``/``checks.py``/``arrowpath.py`` (fast validated decoding), ``batch.py``,
``writer.py`` (inserts, retries, isolation of refused rows), ``offsets.py`` (commits, lag), ``dlq.py`` (dead-letter
topic), ``metrics.py``/``health.py``/``logfmt.py`` (operations), ``views.py``/``integrity.py`` (loss visibility and
the integrity check), ``settings.py``. Also here: ``storage`` (the storage URL, ClickHouse server and chDB) and
``streaming`` (Structured Streaming). Ingest only: detection and the alerter are ``sparktap.detection``.
"""
