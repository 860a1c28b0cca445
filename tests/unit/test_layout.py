"""The folder table of docs/architecture.md as a test, on the import graph as Python sees it (folders mapped to their
import paths: ``tests/support/layout.py``), every import statement included, wherever it stands.

Rooms are ranked; a module may import its own room and the rooms ranked below it, never a peer or a room above, and
no set of modules imports itself round in a circle (type-only imports included). A fresh interpreter then imports
each room, every module under it, and what it ended up loading is checked against the same ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layout import Graph, modules, room_of

RANKS: tuple[frozenset[str], ...] = (
    frozenset({"sparktap", "sparktap.errors"}),
    frozenset({"sparktap.config", "sparktap.endpoints", "native"}),
    frozenset({"schemas"}),
    frozenset({"store", "listener"}),
    frozenset({"collector"}),
    frozenset({"history", "detection"}),
    frozenset({"dashboards", "report"}),
    frozenset(
        {
            "sparktap.settings",
            "sparktap.cli",
            "sparktap.launcher",
            "sparktap.__main__",
            "sparktap.demo",
            "sparktap.local",
        }
    ),
)
"""Bottom first: the shared base (errors, settings helpers, the endpoint server, native code), the contract, the
store and the listener, ingest, then what reads the store (history, detection), what shows findings (dashboards,
the report), and the command that composes them all."""

RANK = {room: rank for rank, rooms in enumerate(RANKS) for room in rooms}
TOP = len(RANKS) - 1
"""The command's own modules are the composition root: they may import each other (``launcher`` -> ``cli``)."""


def _may_import(module: str, target: str) -> bool:
    a, b = room_of(module), room_of(target)
    return a == b or RANK[b] < RANK[a] or RANK[a] == RANK[b] == TOP


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph.read()


def test_every_room_has_a_rank(graph: Graph) -> None:
    assert sorted({room_of(m) for m in graph.files} - set(RANK)) == []


def test_no_module_imports_a_peer_or_a_room_above_it(graph: Graph) -> None:
    bad = [
        f"{graph.source(module, target)}: {room_of(module)} imports {target} ({room_of(target)})"
        for module, targets in sorted(graph.edges().items())
        for target in sorted(targets)
        if not _may_import(module, target)
    ]
    assert bad == []


def test_no_circle_of_imports(graph: Graph) -> None:
    assert graph.cycles() == []


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A function's import, a type-only import, a relative one and the packages an import loads on its way."""
    (tmp_path / "setup.py").write_text('PACKAGE_DIRS = {"sparktap": "sparktap", "sparktap.a": "a", "sparktap.b": "b"}')
    for folder in ("sparktap", "a", "b", "b/inner"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "b" / "inner" / "deep.py").write_text("")
    (tmp_path / "b" / "x.py").write_text("")
    (tmp_path / "a" / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from sparktap.b import x\n"
        "def f():\n    from sparktap.b.inner.deep import thing\n"
        "from . import n\n"
    )
    (tmp_path / "a" / "n.py").write_text("import sparktap.a.m\n")
    found = Graph.read(tmp_path)
    assert sorted(modules(tmp_path)) == [
        "sparktap",
        "sparktap.a",
        "sparktap.a.m",
        "sparktap.a.n",
        "sparktap.b",
        "sparktap.b.inner",
        "sparktap.b.inner.deep",
        "sparktap.b.x",
    ]
    assert found.runtime["sparktap.a.m"] == {"sparktap.b", "sparktap.b.inner", "sparktap.b.inner.deep", "sparktap.a.n"}
    assert found.typed["sparktap.a.m"] == {"sparktap.b", "sparktap.b.x"}
    assert found.cycles() == [["sparktap.a.m", "sparktap.a.n"]]


ENGINES = frozenset({"chdb", "clickhouse"})


def _engine_branches(path: Path) -> list[int]:
    """Lines comparing something's ``kind`` with an engine's name (``target.kind == "chdb"``)."""
    import ast

    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            kind = any(isinstance(n, ast.Attribute) and n.attr == "kind" for n in sides)
            engine = any(isinstance(n, ast.Constant) and n.value in ENGINES for n in sides)
            if kind and engine:
                lines.append(node.lineno)
    return lines


def test_engine_differences_are_capabilities_outside_the_store(graph: Graph) -> None:
    """Only the store names its engines; every other part asks ``target.capabilities`` (a new backend is a new
    entry there, not a branch in every room)."""
    bad = [
        f"{graph.source(module, module).rsplit(':', 1)[0]}:{line}"
        for module, path in sorted(graph.files.items())
        if room_of(module) != "store"
        for line in _engine_branches(path)
    ]
    assert bad == []


def test_the_engine_check_sees_a_branch(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('if target.kind == "chdb":\n    pass\nif "clickhouse" != storage.kind:\n    pass\n')
    assert _engine_branches(source) == [1, 3]


# ---------------------------------------------------------------------------------------------- what an import loads
# The walk above reads the sources; this imports them: a room, every module under it included, must load nothing of
# a room ranked at or above it (an import hidden in a string, ``importlib`` or a plugin entry would show here).

_LOAD_PART = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if info.name.endswith("__main__"):
        continue
    importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""

ROOMS = sorted(room for room in RANK if "." not in room and room != "sparktap")


@pytest.mark.parametrize("room", ROOMS)
def test_importing_a_room_loads_no_module_of_a_peer_or_a_room_above(room: str) -> None:
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _LOAD_PART, f"sparktap.{room}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SPARKTAP_RULE_PACKAGES": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [m for m in json.loads(done.stdout.strip().splitlines()[-1]) if m.split(".")[0] == "sparktap"]
    assert f"sparktap.{room}" in loaded
    assert [m for m in loaded if room_of(m) not in RANK or not _may_import(f"sparktap.{room}", m)] == []


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/fixtures/ or tests/support/; a test module never imports a test module."""
    from tests.support.layout import ROOT

    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for imp in _test_imports(path, name):
            if imp.startswith("tests.") and any(part.startswith("test_") for part in imp.split(".")[1:]):
                bad.append(f"{path.relative_to(ROOT)} imports {imp}")
    assert bad == []


def _test_imports(path: Path, name: str) -> list[str]:
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return out
