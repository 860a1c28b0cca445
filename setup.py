"""Build glue: maps the top-level folders into the ``sparktap`` package, compiles the Java listener and the
collector's C reader."""

from __future__ import annotations

import importlib.util
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


def _packages() -> list[str]:
    found = []
    for package, folder in PACKAGE_DIRS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            found.append(".".join([package, *rel.parts]) if rel.parts else package)
    return found


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
        "sparktap.listener": ["py.typed", "jars/*.jar", "java/**/*.java", "java/**/*.txt"],
        "sparktap.schemas": ["py.typed", "jsonschema/*.json"],
        "sparktap.collector": ["py.typed"],
        "sparktap.detection": ["py.typed"],
        "sparktap.dashboards": ["py.typed"],
        "sparktap.report": ["py.typed"],
        "sparktap.history": ["py.typed"],
        "sparktap.store": ["py.typed"],
        "sparktap.native": ["py.typed", "*.pyi"],
    },
    # sparktap's native code behind one switch (native/__init__.py): the collector's JSON reader, its consumer's
    # message chunks and the store's Native string encoder; building needs a C compiler
    # and the Python headers (.ci/system-deps.sh installs them on Debian)
    ext_modules=[
        Extension(
            "sparktap.native._flatjson",
            ["native/_flatjson.c", "native/_kafkachunk.c"],
            depends=["native/_kafkachunk.h"],
            extra_compile_args=["-O2", "-std=c11"],
        )
    ]
    if sys.version_info >= (3, 11)  # the collector's; a Python 3.9/3.10 install is the relay only (pure Python)
    else [],
    cmdclass={"build_py": BuildPyWithJar},
)
