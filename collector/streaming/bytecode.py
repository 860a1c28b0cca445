"""Precompiled pyspark for the Python processes Spark starts for sparktap's data sources.

Every Python process Spark starts for a Python data source (``create_data_source``, the streaming source's
planning runner, ``plan_data_source_read``, the read workers) gets ``<SPARK_HOME>/python/lib/pyspark.zip`` first
on its ``PYTHONPATH`` (Spark's ``PythonUtils.sparkPythonPath``). A zip written by Spark holds no bytecode and
zipimport never writes any, so each of those processes compiles the pyspark modules it imports again: 0.6 s of CPU
against 0.2 s from bytecode here, three or four processes per query.

:func:`worker_pythonpath` builds, once per pyspark.zip and Python bytecode version, a copy of that zip with a
``.pyc`` next to every module (zipimport reads those) in ``<cache>/pyspark-bytecode/`` and returns the directory
to put on the data sources' ``PYTHONPATH`` (``register`` passes it in the ``envVars`` of the data source's Python
function, so only the processes Spark starts for sparktap's data sources see it; Spark keys its Python worker
pools by those variables, the user's UDFs keep theirs). In that directory a ``sitecustomize`` module, run by
Python at start-up, swaps the precompiled copy in for the original zip on ``sys.path`` only when the original is
the very file it was built from (same real path, size and modification time) and the interpreter's bytecode
version matches; otherwise it changes nothing. It then runs the ``sitecustomize`` that Python would have run.
Opt out with ``spark.sparktap.precompiledPyspark=false``.

The same hook, in the ``pyspark.daemon`` of the data sources' read and write workers only (Spark forks them from
one daemon per worker module, kept for the session), imports ``pyspark.worker`` and the modules listed in
``SPARKTAP_DAEMON_PRELOAD`` (:data:`PRELOAD`, set by ``register`` unless ``spark.sparktap.preloadWorkers=false``)
before the daemon forks anything, so a newly forked worker has them already.
See docs/streaming.md#start-up-cost-of-a-query.
"""

from __future__ import annotations

import hashlib
import logging
import marshal
import os
import shutil
import struct
import sys
import tempfile
import warnings
import zipfile
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktap.collector.streaming")

CONF = "spark.sparktap.precompiledPyspark"
PRELOAD_CONF = "spark.sparktap.preloadWorkers"
PRELOAD_ENV = "SPARKTAP_DAEMON_PRELOAD"
# What a read worker of sparktap-kafka imports beyond its worker module. The source pulls confluent-kafka, whose
# import starts no thread (librdkafka starts them per client, and no client exists before the fork). pyarrow's
# import starts jemalloc's background thread and, through numpy, OpenBLAS's pool: both have pthread_atfork
# handlers and are fork-safe, but Python 3.12+ warns at every fork of a multi-threaded process, so there the
# workers import pyarrow themselves.
PRELOAD = ("sparktap.collector.streaming.source",) + (("pyarrow",) if sys.version_info < (3, 12) else ())
HOOK = "sitecustomize.py"
ZIP = "pyspark.zip"
_LAYOUT = "3"  # bump when the cache's layout or the hook changes
_UNCHECKED_HASH_PYC = 0b01  # PEP 552: hash-based, not checked against the source (the copy is content-addressed)

_HOOK_TEMPLATE = '''"""sparktap: use the precompiled copy of {original!r} (see sparktap.collector.streaming.bytecode).

Generated; changes sys.path only when the original zip is the file this copy was built from.
"""

import os as _os
import sys as _sys

_ORIGINAL = {original!r}
_SIZE = {size!r}
_MTIME_NS = {mtime_ns!r}
_MAGIC = {magic!r}
_COPY = {copy!r}


def _swap():
    try:
        import _frozen_importlib_external

        if _frozen_importlib_external.MAGIC_NUMBER != _MAGIC or not _os.path.isfile(_COPY):
            return
        for index, entry in enumerate(_sys.path):
            if entry.endswith("pyspark.zip") and _os.path.realpath(entry) == _ORIGINAL:
                stat = _os.stat(entry)
                if stat.st_size == _SIZE and stat.st_mtime_ns == _MTIME_NS:
                    _sys.path[index] = _COPY
                return
    except Exception:  # never stand between Spark and its worker
        return


def _chain():
    """Run the sitecustomize that Python would have found without this directory on the path."""
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _preload():
    """In the pyspark.daemon of sparktap's data sources' read and write workers only: import, before it forks any
    worker, the worker module and the modules in SPARKTAP_DAEMON_PRELOAD, so that each forked worker has them.
    (The daemons of create_data_source and plan_data_source_read fork about once a session: nothing to gain.)"""
    names = _os.environ.get("SPARKTAP_DAEMON_PRELOAD", "")
    argv = list(getattr(_sys, "orig_argv", ()))
    if not names or "-m" not in argv:
        return
    at = argv.index("-m")
    if argv[at + 1 : at + 2] != ["pyspark.daemon"]:
        return
    worker = argv[at + 2] if len(argv) > at + 2 and argv[at + 2].startswith("pyspark") else "pyspark.worker"
    if worker != "pyspark.worker":
        return
    import importlib

    done = []
    for name in [worker] + [n.strip() for n in names.split(",") if n.strip()]:
        try:
            importlib.import_module(name)
        except Exception:  # the worker imports it again after the fork and reports the error as usual
            continue
        done.append(name)
    _os.environ["SPARKTAP_DAEMON_PRELOADED"] = ",".join(done)


_swap()
_chain()
_preload()
'''


def enabled(spark: SparkSession) -> bool:
    return _flag(spark, CONF, "false: the workers import pyspark as Spark set up")


def _flag(spark: SparkSession, conf: str, off: str) -> bool:
    value = (spark.conf.get(conf, "true") or "true").strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    from sparktap.errors import ConfigError

    raise ConfigError(f'{conf}="{value}" must be true or false ({off})')


def daemon_preload(spark: SparkSession) -> str | None:
    """The modules the data sources' ``pyspark.daemon`` imports before it forks (the hook reads them from
    ``SPARKTAP_DAEMON_PRELOAD``; it runs only with the precompiled pyspark); None when turned off."""
    if not _flag(spark, PRELOAD_CONF, "false: every forked worker imports pyarrow, confluent-kafka and the source"):
        return None
    return ",".join(PRELOAD)


def spark_pyspark_zip(spark: SparkSession) -> Path | None:
    """The pyspark.zip Spark puts first on its Python workers' PYTHONPATH: ``$SPARK_HOME`` of the JVM."""
    jvm = spark.sparkContext._jvm
    home = jvm.java.lang.System.getenv("SPARK_HOME") if jvm is not None else None
    if not home:
        return None
    path = Path(str(home), "python", "lib", ZIP)
    return path if path.is_file() else None


def worker_pythonpath(spark: SparkSession) -> str | None:
    """The directory for the data sources' PYTHONPATH, built on first use; None when off or not applicable."""
    if not enabled(spark):
        return None
    original = spark_pyspark_zip(spark)
    if original is None:
        return None
    try:
        return str(precompiled(original))
    except (OSError, zipfile.BadZipFile) as exc:
        log.warning(
            'precompiled pyspark not used: building it from zip="%s" failed (%s); the data sources\' Python '
            "processes compile pyspark at start-up as usual (set %s=false to skip trying)",
            original,
            exc,
            CONF,
        )
        return None


def cache_root() -> Path:
    explicit = os.environ.get("SPARKTAP_CACHE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser() / "pyspark-bytecode"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sparktap" / "pyspark-bytecode"


def precompiled(original: Path, root: Path | None = None) -> Path:
    """The directory holding the precompiled copy of ``original`` and its hook (built once, atomically)."""
    real = os.path.realpath(original)
    stat = os.stat(real)
    key = hashlib.sha256(
        f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{MAGIC_NUMBER.hex()}\0{_LAYOUT}".encode()
    ).hexdigest()[:20]
    root = root or cache_root()
    target = root / f"{sys.implementation.cache_tag}-{key}"
    if (target / HOOK).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    staging.chmod(0o755)  # mkdtemp makes it 0700; the copy is pyspark's, readable like the original
    try:
        count = _build_zip(real, staging / ZIP, final=str(target / ZIP))
        hook = _HOOK_TEMPLATE.format(
            original=real, size=stat.st_size, mtime_ns=stat.st_mtime_ns, magic=MAGIC_NUMBER, copy=str(target / ZIP)
        )
        (staging / HOOK).write_text(hook, encoding="utf-8")
        try:
            staging.rename(target)  # atomic; another process may have won the race
        except OSError:
            if not (target / HOOK).is_file():
                raise
        else:
            log.info("precompiled pyspark: %d modules of %s into %s", count, real, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _build_zip(original: str, copy: Path, final: str) -> int:
    """Copy every entry of ``original`` into ``copy`` as it is, with a ``.pyc`` (stored) beside every module but
    tests' (the sources stay compressed: they are read only for tracebacks)."""
    header = MAGIC_NUMBER + struct.pack("<I", _UNCHECKED_HASH_PYC)
    count = 0
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(copy, "w", zipfile.ZIP_STORED) as dst:
        names = set(src.namelist())
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data)
            name = info.filename
            if not name.endswith(".py") or "/tests/" in name or name + "c" in names:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    code = compile(data, f"{final}/{name}", "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue  # zipimport compiles it from the source, as before
            dst.writestr(name + "c", header + source_hash(data) + marshal.dumps(code), zipfile.ZIP_STORED)
            count += 1
    return count
