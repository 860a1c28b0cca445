"""Opening the storage a target names: embedded chDB or a ClickHouse server (the drivers load here, when used)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from sparktap.store.protocol import Storage
from sparktap.store.target import StorageTarget


def open_storage(target: StorageTarget, *, quiet: bool = False, **options: Any) -> Storage:
    """Open the storage a target names. ``options`` go to ServerStorage (``connect_timeout``,
    ``send_receive_timeout``, ``settings``); chDB takes none. Nothing is created until ``ensure_schema``.

    ``quiet``: for a command whose failure is one line: chDB prints its own lock error on file descriptor 2 before
    it raises (the raised error carries the reason), so that output is held back while opening and passed on only
    when the open succeeds. Not for a process with other threads writing to stderr meanwhile."""
    from sparktap.store.embedded import ChdbStorage
    from sparktap.store.server import ServerStorage

    if target.kind == "chdb":
        if options:
            raise TypeError(f"chDB storage takes no options, got {sorted(options)}")
        if not quiet:
            return ChdbStorage(target)
        with _held_stderr():
            return ChdbStorage(target)
    return ServerStorage(target, **options)


@contextlib.contextmanager
def _held_stderr() -> Iterator[None]:
    """chDB prints its own lock error on file descriptor 2 before raising: keep it back while opening, pass it on
    when the open succeeds (the raised error carries the reason), so a held store is one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    ok = False
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
            ok = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                tmp.seek(0)
                os.write(2, tmp.read())
