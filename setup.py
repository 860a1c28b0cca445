"""Build glue: maps the top-level folders into the ``sparktap`` package, compiles the Java listener and the
collector's C reader."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# folder on disk -> import package
PACKAGE_DIRS = {
    "sparktap": "sparktap",
    "sparktap.listener": "listener",
    "sparktap.schemas": "schemas",
    "sparktap.collector": "collector",
    "sparktap.detection": "detection",
    "sparktap.dashboards": "dashboards",
    "sparktap.report": "report",
    "sparktap.history": "history",
    "sparktap.store": "store",
    "sparktap.native": "native",
}


# folders of package data only (no __init__.py): declared as packages so that setuptools ships their files without
# warning that an importable-looking folder is absent from `packages`
DATA_PACKAGES = {
    "sparktap.listener.jars": ["*.jar"],
    "sparktap.listener.java.io.sparktap.listener": ["*.java", "*.txt"],
    "sparktap.schemas.jsonschema": ["*.json"],
}
# build_py compiles the jars into listener/jars/, which git does not hold: setuptools checks that every declared
# package's folder exists before that (metadata), so a fresh clone gets the empty folder here
(ROOT / "listener" / "jars").mkdir(exist_ok=True)


def _packages() -> list[str]:
    found = []
    for package, folder in PACKAGE_DIRS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            found.append(".".join([package, *rel.parts]) if rel.parts else package)
    return found + list(DATA_PACKAGES)


def _load_javabuild():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sparktap_javabuild", ROOT / "listener" / "javabuild.py")
    assert spec is not None and spec.loader is not None  # noqa: S101
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


class BuildPyWithJar(build_py):
    """Compile the listener jars (one per Spark line) into listener/jars/ before the package data is collected."""

    def run(self) -> None:
        _load_javabuild().build_jars()
        super().run()


setup(
    package_dir=PACKAGE_DIRS,  # subpackages resolve through their parent's folder
    packages=_packages(),
    package_data={
        "sparktap": ["py.typed"],
        "sparktap.listener": ["py.typed"],
        "sparktap.schemas": ["py.typed"],
        "sparktap.collector": ["py.typed"],
        "sparktap.detection": ["py.typed"],
        "sparktap.dashboards": ["py.typed"],
        "sparktap.report": ["py.typed"],
        "sparktap.history": ["py.typed"],
        "sparktap.store": ["py.typed"],
        "sparktap.native": ["py.typed", "*.pyi"],
        **DATA_PACKAGES,
    },
    # sparktap's native code behind one switch (native/__init__.py): the collector's JSON reader, its consumer's
    # message chunks and the store's Native string encoder; building needs a C compiler
    # and the Python headers (.ci/system-deps.sh installs them on Debian)
    ext_modules=[
        Extension(
            "sparktap.native._flatjson",
            ["native/_flatjson.c", "native/_flatjson_read.c", "native/_flatjson_scan.c", "native/_kafkachunk.c"],
            depends=["native/_flatjson.h", "native/_kafkachunk.h"],
            extra_compile_args=["-O2", "-std=c11"],
        )
    ]
    # the collector's; a Python 3.9/3.10 install is the relay only (pure Python), and SPARKTAP_NATIVE=off at build
    # time builds none (`make demo` on a host without a C compiler): every part then takes its pure-Python path
    if sys.version_info >= (3, 11) and os.environ.get("SPARKTAP_NATIVE", "").strip().lower() != "off"
    else [],
    cmdclass={"build_py": BuildPyWithJar},
)
