"""The collector fixes glibc's mmap threshold (``collector/memory.py``): large blocks are returned when freed."""

from __future__ import annotations

import platform

import pytest

from sparktap.collector.memory import fix_mmap_threshold


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's M_MMAP_THRESHOLD is glibc's")
def test_the_threshold_is_set_on_glibc_unless_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert fix_mmap_threshold() is True
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "262144")  # the operator's choice wins
    assert fix_mmap_threshold() is False
