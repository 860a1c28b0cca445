"""The folder table of docs/architecture.md as a test: which part may import which (read with ``ast``, nothing run).

Settings shared by every part and the event contract import no feature; ingest (``collector/``) knows nothing of
detection or dashboards; detection knows nothing of dashboards.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("listener", "schemas", "collector", "detection", "dashboards", "report")

FORBIDDEN: dict[str, frozenset[str]] = {
    "sparktap/config.py": frozenset({"collector", "detection", "dashboards", "report"}),
    "sparktap/endpoints.py": frozenset(PARTS),
    "schemas": frozenset({"collector", "detection", "dashboards", "report"}),
    "collector": frozenset({"detection", "dashboards", "report"}),
    "detection": frozenset({"dashboards", "report"}),
    "dashboards": frozenset({"report"}),
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
