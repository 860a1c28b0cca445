"""The built wheel: the four parts install under ``sparktap.*``, the listener jar is inside, it imports cleanly."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
    )
    (built,) = out.glob("sparktap-*.whl")
    return built


def test_wheel_maps_folders_into_the_sparktap_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"sparktap"}
    for expected in (
        "sparktap/listener/jars/sparktap-listener.jar",
        "sparktap/schemas/jsonschema/events.schema.json",
        "sparktap/schemas/events.py",
        "sparktap/collector/__init__.py",
        "sparktap/dashboards/__init__.py",
        "sparktap/py.typed",
    ):
        assert expected in names
    jar = zipfile.ZipFile(wheel).read("sparktap/listener/jars/sparktap-listener.jar")
    assert jar[:2] == b"PK"


def test_wheel_installs_and_imports_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    code = (
        "import sparktap.schemas, sparktap.collector, sparktap.listener, sparktap.dashboards, importlib.util;"
        "assert importlib.util.find_spec('schemas') is None;"
        "print(sparktap.schemas.SCHEMA_VERSION)"
    )
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert result.stdout == "1\n"
    cli = subprocess.run([str(env_dir / "bin" / "sparktap"), "version"], capture_output=True, text=True, check=True)
    assert cli.stdout.startswith("sparktap ")
