"""Free text that leaves the driver: secrets in job descriptions and SQL text are masked by default, left out with
``spark.sparktap.descriptions=off``, sent as Spark has them (URL credentials still masked) with ``full``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    assert_valid,
    listener_settings,
    new_topic,
    read_app_events,
    start_session,
)
from tests.fixtures.spark import SparkSessions

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
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, **settings)
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
