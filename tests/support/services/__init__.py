"""The suite's local services, started as real processes on free ports: a throwaway clickhouse-server and a
ClickHouse cluster with ZooKeeper, Apache Kafka (plain, and SASL_SSL with a private CA), Maven-fetched jars, a
Spark standalone cluster and a Spark Connect server. They build on ``sparktap.local`` (ports, the service base,
the broker base), which the demo ships; nothing in the package imports them."""
