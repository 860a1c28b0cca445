"""Spark event logs into sparktap's pipeline: ``sparktap import PATH…`` (docs/import.md).

The listener's own Java core replays each log through Spark's ``ReplayListenerBus`` (``ReplayMain`` in the listener
jar), so an imported event is made by the code that makes the live one; this package finds the logs
(``sources.py``), runs that JVM (``jvm.py``), sends its events to Kafka or straight into ClickHouse (``sinks.py``),
remembers what it sent (``checkpoint.py``) and reports (``importer.py``, ``cli.py``).
"""
