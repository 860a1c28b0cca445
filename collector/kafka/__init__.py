"""The collector's Kafka wing: the consumer's and dead-letter producer's librdkafka settings and the choice of group
consumer (``client.py``), the collector's own consumer (``librdkafka.py``) on its ctypes binding (``rdkafka.py``),
committed offsets and lag (``offsets.py``), reading refused rows' messages back by offset (``reread.py``) and the
dead-letter queue (``dlq.py``). The service that drives them lives one floor up (``consumer.py``)."""
