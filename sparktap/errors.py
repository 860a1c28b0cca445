"""The root of every exception sparktap raises on purpose."""


class SparktapError(Exception):
    """An expected failure: the CLI prints its message as one line and exits non-zero."""


class ConfigError(SparktapError):
    """A setting is missing or invalid."""


class ServiceError(SparktapError):
    """A service (Kafka, ClickHouse, a local dev service) could not be reached or started."""
