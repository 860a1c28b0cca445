"""The folder table of docs/architecture.md as a test: which part may import which (read with ``ast``), and what
importing each part loads (a fresh interpreter per part, ``sys.modules`` inspected).

Settings shared by every part and the event contract import no feature; ingest (``collector/``) knows nothing of
detection or dashboards; detection knows nothing of dashboards.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("listener", "schemas", "collector", "detection", "dashboards", "report", "history")

FORBIDDEN: dict[str, frozenset[str]] = {
    "sparktap/config.py": frozenset({"collector", "detection", "dashboards", "report"}),
    "sparktap/endpoints.py": frozenset(PARTS),
    "schemas": frozenset({"collector", "detection", "dashboards", "report"}),
    "collector": frozenset({"detection", "dashboards", "report"}),
    "detection": frozenset({"dashboards", "report"}),
    "dashboards": frozenset({"report"}),
    "history": frozenset({"detection", "dashboards", "report"}),
}


def _sources(where: str) -> list[Path]:
    path = ROOT / where
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    """Every module name an import statement of the file names, anywhere in it (functions included)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; sparktap imports absolutely")
            yield node.lineno, node.module or ""
            for alias in node.names:  # `from sparktap import collector`
                yield node.lineno, f"{node.module}.{alias.name}"


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "sparktap" and len(parts) > 1 and parts[1] in PARTS:
        return parts[1]
    return None


@pytest.mark.parametrize("where", sorted(FORBIDDEN))
def test_no_part_imports_what_the_architecture_forbids(where: str) -> None:
    files = _sources(where)
    assert files, where
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in _imported(path)
        if _part(module) in FORBIDDEN[where]
    ]
    assert bad == []


def test_the_walk_sees_a_forbidden_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from sparktap.detection.rule import Rule\n\nimport sparktap.dashboards\n")
    assert sorted(str(_part(m)) for _, m in _imported(source)) == ["dashboards", "detection", "detection"]


# ---------------------------------------------------------------------------------------------- what an import loads
# The walk above sees only the import statements of a part's own files; an import of a neutral module that itself
# imports a feature (``sparktap.settings`` -> ``sparktap.detection.settings``) slips past it. So a fresh interpreter
# imports each part, every module under it included, and the modules it ended up loading are checked.

LOADS_NOTHING_OF: dict[str, frozenset[str]] = {
    "collector": frozenset({"detection", "dashboards", "report"}),
    "dashboards": frozenset({"report"}),
    "detection": frozenset({"dashboards", "report"}),
    "schemas": frozenset({"collector", "detection", "dashboards", "report"}),
}

_LOAD_PART = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by(part: str) -> list[str]:
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _LOAD_PART, f"sparktap.{part}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SPARKTAP_RULE_PACKAGES": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("part", sorted(LOADS_NOTHING_OF))
def test_importing_a_part_loads_no_module_of_a_part_it_may_not_import(part: str) -> None:
    loaded = _loaded_by(part)
    assert f"sparktap.{part}" in loaded
    assert [m for m in loaded if _part(m) in LOADS_NOTHING_OF[part]] == []


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/fixtures/ or tests/support/; a test module never imports a test module."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, module in _imported(path)
        if any(part.startswith("test_") for part in module.split(".")[1:]) and module.startswith("tests.")
    ]
    assert bad == []
