"""sparktap: live telemetry for Apache Spark applications."""

__version__ = "0.1.0"

DEFAULT_TOPIC = "sparktap.events"
"""The one default Kafka topic of the events: the relay, the spool drain, the settings, the streaming collector and the
demo read it from here (this module imports nothing, so the relay-only install can too). The Java listener passes
the topic to the relay."""

__all__ = ["DEFAULT_TOPIC", "__version__"]
