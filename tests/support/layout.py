"""The house as the tools see it: the folders mapped to their import paths (``setup.py``'s ``PACKAGE_DIRS``), a view
of the tree where they match (a folder of symlinks, for mypy), and the import graph read from the sources.

    python -m tests.support.layout view build/tree     # the view mypy checks (``make lint``)
    python -m tests.support.layout graph               # the room-to-room arrows and any circle, for a person

Every import statement counts, wherever it stands (a function's body included), and so does each package an import
loads on its way: ``from sparktap.store.target import X`` loads ``sparktap.store`` too. Imports under
``if TYPE_CHECKING:`` are kept apart (``type_only``): they cost nothing at run time but are arrows of the design all
the same.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """``PACKAGE_DIRS`` of ``setup.py`` (import package -> folder), read without running the build."""
    tree = ast.parse((root / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "PACKAGE_DIRS" and node.value is not None:
            mapping = ast.literal_eval(node.value)
            assert isinstance(mapping, dict)
            return {str(k): str(v) for k, v in mapping.items()}
    raise LookupError("setup.py defines no PACKAGE_DIRS")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its import name, with the file it is read from."""
    mapping = package_dirs(root)
    owned = {folder for package, folder in mapping.items() if package != "sparktap"}
    out: dict[str, Path] = {}
    for package, folder in mapping.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if package == "sparktap" and rel.parts[0] in owned:
                continue
            if not (path.parent / "__init__.py").exists():
                continue  # a script beside a package (setup glue, jars' build helpers): not importable
            parts = [*package.split("."), *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


@dataclass(frozen=True)
class Import:
    line: int
    module: str
    type_only: bool


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, name: str, known: set[str] | frozenset[str]) -> Iterator[Import]:
    """Every sparktap module one file's import statements name (``from p import m`` names ``p.m`` when that is a
    module), with the packages each loads on its way."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.body:
                yield from walk(child, True)
            for child in node.orelse:
                yield from walk(child, type_only)
            return
        named: list[str] = []
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            named = [base]
            named += [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
        for module in named:
            if module.split(".")[0] != "sparktap":
                continue
            parts = module.split(".")
            for end in range(1, len(parts) + 1):  # the packages loaded on the way
                loaded = ".".join(parts[:end])
                if loaded in known and loaded != name and not name.startswith(loaded + "."):
                    yield Import(getattr(node, "lineno", 0), loaded, type_only)
        for child in ast.iter_child_nodes(node):
            yield from walk(child, type_only)

    yield from walk(tree, False)


@dataclass
class Graph:
    """Module -> the modules it imports (run-time arrows, and type-only ones apart)."""

    files: dict[str, Path]
    runtime: dict[str, set[str]] = field(default_factory=dict)
    typed: dict[str, set[str]] = field(default_factory=dict)
    where: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path = ROOT) -> Graph:
        files = modules(root)
        known = frozenset(files)
        graph = cls(files)
        for name, path in files.items():
            graph.runtime[name] = set()
            graph.typed[name] = set()
            for imp in imports_of(path, name, known):
                (graph.typed if imp.type_only else graph.runtime)[name].add(imp.module)
                graph.where.setdefault((name, imp.module), imp.line)
        return graph

    def edges(self, *, type_only: bool = True) -> dict[str, set[str]]:
        if not type_only:
            return self.runtime
        return {m: self.runtime[m] | self.typed[m] for m in self.files}

    def cycles(self, *, type_only: bool = True) -> list[list[str]]:
        """The strongly connected components of more than one module (Tarjan), each sorted."""
        edges = self.edges(type_only=type_only)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for nxt in sorted(edges.get(node, ())):
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

        for node in sorted(edges):
            if node not in index:
                visit(node)
        return sorted(out)

    def source(self, module: str, imported: str) -> str:
        path = self.files[module]
        try:
            shown = path.relative_to(ROOT)
        except ValueError:
            shown = path
        return f"{shown}:{self.where.get((module, imported), 0)}"


def make_view(dest: Path, root: Path = ROOT) -> Path:
    """A folder where the import paths are folders: ``dest/sparktap/<room>`` links to each room's folder, and the
    ``sparktap`` folder's own files are linked one by one. Made anew each time; returns ``dest``."""
    mapping = package_dirs(root)
    pkg = dest / "sparktap"
    if dest.exists():
        for path in sorted(dest.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                path.rmdir()
    pkg.mkdir(parents=True)
    rooms = {package.split(".", 1)[1]: folder for package, folder in mapping.items() if package != "sparktap"}
    base = root / mapping["sparktap"]
    for entry in sorted(base.iterdir()):
        if entry.name in rooms or entry.name == "__pycache__":
            continue
        os.symlink(entry.resolve(), pkg / entry.name)
    for room, folder in rooms.items():
        assert "." not in room, f"{room}: nested rooms are not mapped"
        os.symlink((root / folder).resolve(), pkg / room)
    return dest


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "view":
        print(make_view(Path(argv[1]).resolve()))  # noqa: T201
        return 0
    if argv == ["graph"]:
        graph = Graph.read()
        rooms: dict[tuple[str, str], int] = {}
        for module, targets in graph.edges().items():
            for target in targets:
                a, b = room_of(module), room_of(target)
                if a != b:
                    rooms[(a, b)] = rooms.get((a, b), 0) + 1
        for (a, b), n in sorted(rooms.items()):
            print(f"{a:>12} -> {b:<12} {n}")  # noqa: T201
        for cycle in graph.cycles():
            print("circle:", " ".join(cycle))  # noqa: T201
        return 0
    print(__doc__)  # noqa: T201
    return 2


def room_of(module: str) -> str:
    """The room a module lives in: ``sparktap.store.target`` -> ``store``; the ``sparktap`` folder's own modules by
    their name (``sparktap.cli`` -> ``sparktap.cli``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "sparktap"
    if parts[1] in {p.split(".", 1)[1] for p in package_dirs() if p != "sparktap"}:
        return parts[1]
    return ".".join(parts[:2])


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
