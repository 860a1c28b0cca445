"""Settings shared by every part: the Kafka group (``SPARKTAP_KAFKA__*``), the default topic, and how a process's
settings are read and reported (``SETTINGS_CONFIG``, ``settings_error``).

This module imports no part of sparktap: each part declares its own group beside its code
(``store/settings.py``, ``collector/settings.py``, ``detection/settings.py``) and reads the groups it needs, no
more; a process that only talks to Kafka (``sparktap relay-drain``, ``sparktap import`` to Kafka) reads
``KafkaProcessSettings``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from sparktap import DEFAULT_TOPIC
from sparktap.errors import ConfigError

__all__ = [
    "DEFAULT_TOPIC",
    "SETTINGS_CONFIG",
    "KafkaProcessSettings",
    "KafkaSettings",
    "parse_kafka_options",
    "secret_option_warnings",
    "load_kafka_settings",
    "settings_error",
]

SETTINGS_CONFIG = SettingsConfigDict(
    env_prefix="SPARKTAP_",
    env_nested_delimiter="__",
    frozen=True,
    extra="forbid",
)


class KafkaSettings(BaseModel):
    """Kafka connection. ``extra`` passes straight through to librdkafka (``security.protocol``, ``sasl.*``, …)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = DEFAULT_TOPIC
    dlq_topic: str | None = Field(default=None, description="dead-letter topic; default '<topic>.dlq'")
    group_id: str = "sparktap-collector"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)

    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.topic}.dlq"

    def librdkafka(self) -> dict[str, Any]:
        """The librdkafka configuration dict for this group (secrets revealed only here)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        conf.update(self.extra)
        return conf


def parse_kafka_options(values: tuple[str, ...]) -> dict[str, str]:
    """Command-line ``-X key=value`` librdkafka settings as a dict (the value may contain ``=``)."""
    conf: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X expects key=value (a librdkafka setting), got {key.strip() or item!r}")
        conf[key.strip()] = value
    return conf


# a setting named so holds a secret (a token endpoint's URL does not)
_SECRET_KEY = re.compile(r"password|secret|token(?!\.endpoint)|jaas|\.key\.pem$", re.IGNORECASE)
# librdkafka settings that have a settings field of their own (and so an environment variable)
_FIELD_OF = {"sasl.password": "sasl_password"}


def secret_env_var(key: str) -> str:
    """Where a secret librdkafka setting belongs instead of ``-X``: its own variable, or one key of ``EXTRA``."""
    if key in _FIELD_OF:
        return f"SPARKTAP_KAFKA__{_FIELD_OF[key].upper()}"
    return f'SPARKTAP_KAFKA__EXTRA=\'{{"{key}": "…"}}\''


def secret_option_warnings(conf: dict[str, str]) -> list[str]:
    """One warning per ``-X`` setting whose name says it holds a secret (password, secret, token …): the command
    line is visible to every user of the host (``ps``) and stays in shell history. The value is never quoted."""
    return [
        f"-X {key}=… puts a secret on the command line (visible in ps and the shell history); set it in the "
        f"environment instead: {secret_env_var(key)}"
        for key in conf
        if _SECRET_KEY.search(key)
    ]


def settings_error(exc: ValidationError) -> ConfigError:
    """A settings validation error as one clear line naming the environment variables."""
    problems = []
    for err in exc.errors():
        where = "__".join(str(p) for p in err["loc"]).upper()
        problems.append(f"SPARKTAP_{where}: {err['msg']}")
    return ConfigError("invalid setting " + "; ".join(problems))


class KafkaProcessSettings(BaseSettings):
    """A process that only talks to Kafka: ``SPARKTAP_KAFKA__*``."""

    model_config = SETTINGS_CONFIG

    kafka: KafkaSettings = KafkaSettings()


S = TypeVar("S", bound=BaseSettings)


def load(settings: type[S], **overrides: Any) -> S:
    """A process's settings of type ``settings`` from the environment plus overrides; a bad value is one clear
    ConfigError line naming the variables (every room's ``load_*_settings`` is this)."""
    try:
        return settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from exc


def load_kafka_settings(**overrides: Any) -> KafkaProcessSettings:
    """The Kafka settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    return load(KafkaProcessSettings, **overrides)
