"""sparktap.collector: Kafka -> ClickHouse.

The consumer-group service (``sparktap collect``, docs/collector.md): ``consumer.py`` (the service loop),
``decode.py``/``checks.py``/``arrowpath.py`` (fast validated decoding), ``batch.py``, ``writer.py`` (inserts,
retries, isolation of refused rows), ``offsets.py`` (commits, lag), ``dlq.py`` (dead-letter topic),
``metrics.py``/``health.py``/``logfmt.py`` (operations), ``views.py``/``integrity.py`` (loss visibility and the
integrity check). Also here: ``storage`` (ClickHouse server and chDB), ``streaming`` (Structured Streaming),
``detection`` and the alerter.
"""
