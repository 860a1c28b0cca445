"""Shared test helpers: imported by test modules, never holding tests (a test module imports no other test module)."""
