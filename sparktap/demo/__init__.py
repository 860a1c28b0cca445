"""The first-run demo: embedded broker, collector on chDB, sample Spark jobs, findings, report, Grafana bundle."""
