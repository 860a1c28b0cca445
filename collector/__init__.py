"""sparktap.collector: Kafka -> ClickHouse.

The consumer-group service (``sparktap collect``, docs/collector.md): ``consumer.py`` (the service loop),
``decode.py``/``checks.py``/``arrowpath.py`` (fast validated decoding), ``batch.py``,
``writer.py`` (inserts, retries, isolation of refused rows), ``offsets.py`` (commits, lag), ``dlq.py`` (dead-letter
topic), ``metrics.py``/``health.py``/``logfmt.py`` (operations), ``views.py``/``integrity.py`` (loss visibility and
the integrity check), ``settings.py``. Also here: ``storage`` (the storage URL, ClickHouse server and chDB) and
``streaming`` (Structured Streaming). Ingest only: detection and the alerter are ``sparktap.detection``.
"""
