"""``sparktap listener-jar`` and ``sparktap relay-drain``."""

from __future__ import annotations

from pathlib import Path

import click

from sparktap.errors import ServiceError


@click.command("listener-jar")
@click.option(
    "--spark-version",
    default=None,
    metavar="X.Y",
    help="The cluster's Spark version (3.3-3.5 or 4.x); default: the pyspark installed with this Python.",
)
@click.option("--rebuild", is_flag=True, help="Compile the Java sources again (javac; see docs/install-listener.md).")
def listener_jar(spark_version: str | None, rebuild: bool) -> None:
    """Print the path of the listener jar for a Spark version (for spark.jars / spark-defaults.conf)."""
    from sparktap.listener import jar_path

    click.echo(str(jar_path(spark_version, rebuild=rebuild)))


@click.command("relay-drain")
@click.option(
    "--spool-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Spool directory (spark.sparktap.relay.spoolDir); default <tmp>/sparktap-spool-<user>.",
)
@click.option("--bootstrap-servers", default=None, help="Kafka servers; default SPARKTAP_KAFKA__BOOTSTRAP_SERVERS.")
@click.option("--topic", default=None, help="Send everything to this topic instead of each segment's own.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for delivery.")
@click.option("-X", "kafka_options", multiple=True, metavar="KEY=VALUE", help="Extra librdkafka setting (repeatable).")
def relay_drain(
    spool_dir: Path | None,
    bootstrap_servers: str | None,
    topic: str | None,
    timeout: float,
    kafka_options: tuple[str, ...],
) -> None:
    """Resend spooled listener events to Kafka now; prints one line with the counts."""
    from sparktap.config import load_kafka_settings, parse_kafka_options, secret_option_warnings
    from sparktap.listener.drain import drain
    from sparktap.listener.spool import default_spool_dir

    settings = load_kafka_settings()
    kafka = settings.kafka.librdkafka()
    if bootstrap_servers:
        kafka["bootstrap.servers"] = bootstrap_servers
    options = parse_kafka_options(kafka_options)
    for warning in secret_option_warnings(options):
        click.echo(f"warning: {warning}", err=True)
    kafka.update(options)
    result = drain(spool_dir or default_spool_dir(), kafka, topic=topic, timeout=timeout)
    click.echo(result.line())
    if result.failed:
        raise ServiceError(
            f"{result.failed} events could not be delivered within {timeout:g}s and stay in the spool: check that "
            f'Kafka at bootstrap.servers="{kafka.get("bootstrap.servers")}" is up, then run relay-drain again'
        )


COMMANDS: list[click.Command] = [listener_jar, relay_drain]
