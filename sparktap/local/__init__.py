"""Local services the demo runs (the embedded broker), with the free-port helpers and the service base the
test services (tests/support/services/) build on."""
