"""Local development services (the embedded broker, a throwaway ClickHouse server) for the demo and the tests."""
