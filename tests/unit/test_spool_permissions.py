"""Spool files hold event data (names, SQL text): only the relay's user may read them (0600 in a 0700 directory)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sparktap.listener.spool import Spool


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_segments_are_0600_in_a_0700_directory_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o000)  # the most permissive umask: the modes must not come from it
    try:
        directory = tmp_path / "spool"
        spool = Spool(directory, max_bytes=1 << 20, topic="events")
        assert spool.usable, spool.problem
        assert spool.append(b"k", b'{"seq":1}')
        spool.seal()
        spool.write_back("events", [(b"k", b'{"seq":2}')])
        assert spool.append(b"k", b'{"seq":3}')  # an open segment too
        spool.flush()
    finally:
        os.umask(old)
    files = sorted(directory.iterdir())
    assert len(files) == 3
    assert {p.suffix for p in files} == {".seg", ".open"}
    assert {_mode(p) for p in files} == {0o600}
    assert _mode(directory) == 0o700
    spool.close()


def test_an_existing_open_directory_is_closed_to_others(tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    Spool(directory, max_bytes=1 << 20, topic="events")
    assert _mode(directory) == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to plant a directory owned by another user")
def test_a_directory_planted_by_another_user_is_not_used(tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o777)
    os.chown(directory, 12345, 12345)
    spool = Spool(directory, max_bytes=1 << 20, topic="events")
    assert not spool.usable
    assert spool.problem.startswith(f'spool dir="{directory}" belongs to uid 12345, not to this user')
    assert not spool.append(b"k", b"v")
    assert list(directory.iterdir()) == []
