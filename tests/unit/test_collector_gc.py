"""The collector's loop runs with Python's young collections spaced out and its start-up objects frozen
(``collector/consumer.py``, ``quiet_gc``), and the process gets its own GC settings back when the last loop ends."""

from __future__ import annotations

import gc

import pytest

from sparktap.collector.consumer import GC_GEN0_THRESHOLD, quiet_gc


def test_quiet_gc_spaces_young_collections_and_restores_the_process_settings() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(700, 11, 12)
    try:
        with quiet_gc():
            assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 11, 12)
            assert gc.get_freeze_count() > frozen  # what existed at the start is frozen
            with quiet_gc():  # a second collector in the same process
                assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 11, 12)
            assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 11, 12)  # the first one still runs
        assert gc.get_threshold() == (700, 11, 12)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*before)


def test_quiet_gc_restores_the_settings_when_the_loop_raises() -> None:
    before = gc.get_threshold()
    gc.set_threshold(500, 10, 10)
    try:
        with pytest.raises(RuntimeError, match="loop failed"), quiet_gc():
            assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 10, 10)
            raise RuntimeError("loop failed")
        assert gc.get_threshold() == (500, 10, 10)
    finally:
        gc.set_threshold(*before)
