"""The real Apache Kafka broker with a secured listener: SASL_SSL, SCRAM-SHA-512 users, a private CA, ACLs.

Beside its PLAINTEXT listener (the broker's own and the readiness probe's, as in `ApacheKafkaBroker`) it serves
`SASL_SSL://127.0.0.1:<sasl_port>` with a certificate signed by a CA made at start (tests.support.services.tls) and PEM
keystores. The SCRAM users (`users`, plus the super user `admin`) are written into the storage when it is
formatted, so they exist before the broker serves anything. `StandardAuthorizer` (KRaft) denies everything no
ACL allows: `allow()` grants a user operations on a topic or on a consumer group prefix.

>>> with SecuredKafkaBroker(users={"relay": "s3cret"}) as broker:
...     broker.create_topic("events")
...     broker.allow("relay", topic="events", operations=("WRITE",))
...     Producer({**broker.client_config("relay"), "acks": "all"})
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from sparktap.errors import ServiceError
from tests.support.services.kafka import JVM_DEFAULTS, ApacheKafkaBroker
from tests.support.services.tls import IssuedCertificate, issue, make_ca

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
# half the plain broker's heap: the secured broker runs beside the suite's own
SECURED_JVM = tuple(option for option in JVM_DEFAULTS if not option.startswith("-Xmx")) + ("-Xmx512m",)


class SecuredKafkaBroker(ApacheKafkaBroker):
    """`ApacheKafkaBroker` plus a SASL_SSL (SCRAM-SHA-512) listener with a private CA, and ACLs enforced."""

    def __init__(
        self,
        *,
        users: Mapping[str, str],
        directory: Path | str | None = None,
        config: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        bad = [name for name in users if not name.isidentifier() or name == ADMIN]
        if bad:
            raise ValueError(f"SCRAM user names must be identifiers other than {ADMIN!r}, got {bad}")
        self.users = {ADMIN: secrets.token_hex(16), **users}
        secured = {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the admin over SASL_SSL; ANONYMOUS is the PLAINTEXT and CONTROLLER listeners (the node itself)
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.enabled.mechanisms": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            **(config or {}),
        }
        options.setdefault("jvm_options", SECURED_JVM)
        super().__init__(directory=directory, config=secured, **options)
        self._sasl_port: int | None = None
        self.certificate: IssuedCertificate | None = None

    # -- addresses and clients --------------------------------------------------------------------------------

    @property
    def sasl_port(self) -> int:
        if self._sasl_port is None:
            raise ServiceError("the Apache Kafka broker is not started: call start() first")
        return self._sasl_port

    @property
    def sasl_bootstrap_servers(self) -> str:
        return f"{self.host}:{self.sasl_port}"

    @property
    def ca_path(self) -> Path:
        """The CA bundle clients trust (`ssl.ca.location`)."""
        if self.certificate is None:
            raise ServiceError("the Apache Kafka broker is not started: call start() first")
        return self.certificate.ca

    def client_config(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka settings for `user` on the SASL_SSL listener (its own password unless one is given)."""
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user] if password is None else password,
            "ssl.ca.location": str(self.ca_path),
        }

    # -- ACLs -------------------------------------------------------------------------------------------------

    def allow(
        self,
        user: str,
        *,
        topic: str | None = None,
        group_prefix: str | None = None,
        operations: Iterable[str] = ("READ",),
        timeout: float = 30.0,
    ) -> None:
        """ALLOW `operations` (AclOperation names: READ, WRITE, DESCRIBE …) to `user` on `topic` (literal) and/or on
        the consumer groups whose id starts with `group_prefix`; the super user sets them over SASL_SSL."""
        resources: list[tuple[ResourceType, str, ResourcePatternType]] = []
        if topic is not None:
            resources.append((ResourceType.TOPIC, topic, ResourcePatternType.LITERAL))
        if group_prefix is not None:
            resources.append((ResourceType.GROUP, group_prefix, ResourcePatternType.PREFIXED))
        bindings = [
            AclBinding(kind, name, pattern, f"User:{user}", "*", AclOperation[op], AclPermissionType.ALLOW)
            for kind, name, pattern in resources
            for op in operations
        ]
        admin = AdminClient({**self.client_config(ADMIN), "log_level": 0})
        for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                raise ServiceError(f'cannot create the ACL binding="{binding}": {exc}') from exc

    # -- lifecycle hooks --------------------------------------------------------------------------------------

    def start(self) -> SecuredKafkaBroker:
        """Make the CA and the broker's certificate (once), then start as `ApacheKafkaBroker` does."""
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="sparktap-kafka-"))
        if self.certificate is None:
            tls = self.directory / "tls"
            self.certificate = issue(make_ca(tls), tls, "broker")
        super().start()
        return self

    def _extra_ports(self) -> None:
        (self._sasl_port,) = self.fresh_ports(1, self.host)

    def _listener_properties(self) -> dict[str, str]:
        properties = super()._listener_properties()
        if self.certificate is None:  # pragma: no cover - start() makes it first
            raise ServiceError("the broker's certificate is missing: call start()")
        sasl = f"SASL_SSL://{self.host}:{self.sasl_port}"
        properties["listeners"] += f",{sasl}"
        properties["advertised.listeners"] += f",{sasl}"
        properties["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
        properties.update(
            {
                "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                "listener.name.sasl_ssl.ssl.keystore.location": str(self.certificate.keystore()),
                "listener.name.sasl_ssl.ssl.truststore.type": "PEM",
                "listener.name.sasl_ssl.ssl.truststore.location": str(self.certificate.ca),
            }
        )
        return properties

    def _format_arguments(self) -> list[str]:
        scram = [f"{MECHANISM}=[name={user},password={password}]" for user, password in self.users.items()]
        return [*super()._format_arguments(), *(arg for entry in scram for arg in ("--add-scram", entry))]
