"""Free text that leaves the driver: secrets in job descriptions and SQL text are masked by default, left out with
``spark.sparktap.descriptions=off``, sent as Spark has them (URL credentials still masked) with ``full``.

These applications produce from the driver JVM (``transport=kafka``, the jar's default): redaction happens before
anything leaves the JVM, whichever transport carries it (the relay sends the same bytes:
test_listener_jvm_transport.py's contract test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    assert_valid,
    listener_settings,
    new_topic,
    read_all,
    read_app_events,
    start_session,
)
from tests.fixtures.spark import SparkSessions
from tests.support.collector import in_process, settings_for, wait_inserted

pytestmark = pytest.mark.integration

DESCRIPTION = (
    "load token=CANARY_T1 password 'CANARY_P2' from jdbc:postgresql://etl:CANARY_U3@db:5432/x "
    'with PlainLoginModule required username="etl" password="CANARY_J4"; api_key: CANARY_K5 Bearer CANARY_B6'
)
REDACTED = (
    "load token=*********(redacted) password *********(redacted) from jdbc:postgresql://***@db:5432/x "
    'with PlainLoginModule required username="etl" password=*********(redacted); api_key: *********(redacted) '
    "Bearer *********(redacted)"
)
FULL = DESCRIPTION.replace("etl:CANARY_U3@", "***@")


@pytest.mark.parametrize(("mode", "expected"), [(None, REDACTED), ("off", None), ("full", FULL)])
def test_job_and_sql_descriptions_per_mode(
    mode: str | None, expected: str | None, listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    settings = {} if mode is None else {"descriptions": mode}
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, transport="kafka", **settings)
    spark = start_session(listener_sessions, conf)
    spark.sparkContext.setJobDescription(DESCRIPTION)  # Spark uses it for the SQL execution's description too
    assert spark.sql("SELECT 42 AS answer").collect()[0][0] == 42
    listener_sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    jobs, sqls = events.of("job_start"), events.of("sql_start")
    assert jobs and sqls
    assert [j.get("description") for j in jobs] == [expected] * len(jobs)
    assert [q.get("description") for q in sqls] == [expected] * len(sqls)
    if mode == "full":
        assert all(b"CANARY_U3" not in (r.value or b"") for r in events.records)
    else:
        assert [r.value[:120] for r in events.records if b"CANARY" in (r.value or b"")] == []


# Every secret part holds "CANARY" (and nothing else does): it must not appear in Kafka or ClickHouse. The secrets
# carry / @ + = as real keys, passwords and signatures do.
CANARY_DESCRIPTION = (
    "copy s3a://AKIAEXAMPLE:wJal/CANARY_S3+K7=@bucket/in to jdbc:postgresql://etl:CANARY_PG@ss@db:5432/x "
    "with fs.azure.account.key.acct.dfs.core.windows.net=Zm9v+CANARY_AZ/Y== "
    "from https://acct.blob.core.windows.net/c/f?sv=2021-06-08&sp=rl&sig=CANARY_SAS%2Bd%3D "
    '.option("password", "CANARY_OPT/p@s+s=") .option("clientSecret", "CANARY_SEC") '
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=CANARY_AK+/=;EndpointSuffix=core.windows.net"
)
CANARY_DESCRIPTION_REDACTED = (
    "copy s3a://***@bucket/in to jdbc:postgresql://***@db:5432/x "
    "with fs.azure.account.key.acct.dfs.core.windows.net=*********(redacted) "
    "from https://acct.blob.core.windows.net/c/f?sv=2021-06-08&sp=rl&sig=*********(redacted) "
    '.option("password", *********(redacted)) .option("clientSecret", *********(redacted)) '
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=*********(redacted);EndpointSuffix=core.windows.net"
)
CANARY_SQL = (
    "SELECT 'jdbc:oracle:thin:scott/CANARY_ORA@db:1521/x' AS a, 'sasl.password=CANARY_SASL/+=' AS b, "
    "'Bearer CANARY_BEARER+/=' AS c, id FROM range(10)"
)
CANARY_ERROR = "raise_error('cannot open abfss://u:CANARY_ERR/+=@c.dfs.core.windows.net/x with token=CANARY_ERR2')"
CANARY_CONF = {
    "spark.app.name": "etl password=CANARY_APP/+=",
    # allow-listed prefixes whose values are secrets: never sent
    "spark.sql.adaptive.canary.note": "fs.azure.account.key.a.blob.core.windows.net=CANARY_CONF1+/=",
    "spark.shuffle.canary.url": "s3a://AK:CANARY_CONF2/x@bucket/p",
    "spark.dynamicAllocation.canarySas": "https://a.blob.core.windows.net/c?sv=2020&sig=CANARY_CONF3%2B",
}


def test_redaction_canaries_reach_neither_kafka_nor_clickhouse(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    """A real application whose job descriptions, SQL text, failure messages and conf carry secrets with / @ + =,
    Azure account keys, SAS signatures and .option("password", …) → listener → Kafka → collector → ClickHouse
    (chDB): zero matches of any secret part in the topic (and its DLQ) and in any table."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    conf = {**listener_settings(bootstrap, topic, tmp_path / "spool", transport="kafka"), **CANARY_CONF}
    spark = start_session(listener_sessions, conf)
    app_id = spark.sparkContext.applicationId
    spark.sparkContext.setJobDescription(CANARY_DESCRIPTION)
    assert spark.range(0, 100, 1, 2).count() == 100
    spark.sparkContext.setJobDescription(None)
    assert len(spark.sql(CANARY_SQL).collect()) == 10
    with pytest.raises(Exception, match="CANARY_ERR2"):  # the job fails: its message is Spark's, with the secret
        spark.sql(f"SELECT {CANARY_ERROR} FROM range(1)").collect()
    listener_sessions.stop()

    events = read_app_events(bootstrap, topic)
    assert_valid(events.events)
    types = events.types()
    assert types["job_start"] == types["job_end"] >= 3 and types["sql_plan_stats"] >= 2
    (failed_job,) = [j for j in events.of("job_end") if j["result"] == "failed"]
    assert "token=*********(redacted)" in failed_job["failure_reason"]
    assert "abfss://***@c.dfs.core.windows.net/x" in failed_job["failure_reason"]
    described = [e["description"] for e in events.of("job_start") + events.of("sql_start")
                 if "copy s3a://" in e.get("description", "")]  # fmt: skip
    assert len(described) >= 2
    assert set(described) == {CANARY_DESCRIPTION_REDACTED}
    (start,) = events.of("app_start")
    assert not set(CANARY_CONF) - {"spark.app.name"} & set(start["properties"])
    assert start["app_name"] == "etl password=*********(redacted)"
    leaked = [(r.value or b"")[:200] for r in events.records if b"CANARY" in (r.key or b"") + (r.value or b"")]
    assert leaked == []

    settings = settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", batch_interval_seconds=0.25)
    with in_process(settings) as collector:
        wait_inserted(collector, len(events.records), 120)
        storage = collector.storage
        assert storage is not None
        tables = [
            str(r["name"])
            for r in storage.query(
                f"SELECT name FROM system.tables WHERE database = '{storage.database}' "  # noqa: S608
                "AND engine NOT LIKE '%View%'"
            )
        ]
        columns = {  # every column but the health rollup's binary AggregateFunction states (no text in them)
            t: ", ".join(
                f"`{r['name']}`"
                for r in storage.query(
                    f"SELECT name FROM system.columns WHERE database = '{storage.database}' AND table = '{t}' "  # noqa: S608
                    "AND type NOT LIKE 'AggregateFunction%' ORDER BY position"
                )
            )
            for t in tables
        }
        stored = {t: storage.query(f"SELECT {columns[t]} FROM {storage.qualified(t)}") for t in tables}  # noqa: S608
    assert sum(len(rows) for rows in stored.values()) >= len(events.records)
    assert any(str(r.get("app_id")) == app_id for r in stored["job_end"])
    found = {t: [str(row)[:200] for row in rows if "CANARY" in str(row)] for t, rows in stored.items()}
    assert {t: rows for t, rows in found.items() if rows} == {}
    assert read_all(bootstrap, topic + ".dlq", timeout=1.0) == []
