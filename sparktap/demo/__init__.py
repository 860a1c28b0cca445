"""The first-run demo: an embedded broker, the collector on chDB, sample Spark jobs, findings, report, Grafana bundle."""
