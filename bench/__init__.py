"""Benchmarks: each module prints one line per figure; none is part of the test suite (``make bench``)."""
