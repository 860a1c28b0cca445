"""The built wheel: the parts install under ``sparktap.*``, both listener jars are inside, it imports cleanly, it
ships the product and not the test bench (``sparktap/local/`` holds only what the demo runs, nothing imports
``tests``), and the command and the demo's modules run from it in a fresh venv; and on a Python 3.9 driver host the
same project installs as the relay alone, with confluent-kafka its one dependency."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.kafka import KafkaService

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


LEFT_BEHIND = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "demo-output"
)
"""What a fresh clone does not have: a stale ``build/lib`` would put modules removed since into the wheel."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel`` on a copy of the working tree without build outputs (the listener jars, up to
    date, are kept: they are rebuilt only when their sources changed)."""
    source, out = tmp_path_factory.mktemp("source") / "sparktap", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, source, ignore=LEFT_BEHIND, symlinks=True)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(source)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (built,) = out.glob("sparktap-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its dependencies (no extra) installed; its bin directory."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    # no .pyc written for the dependencies (pyarrow, chdb and the rest): the checks import a few modules, once
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    subprocess.run([*pip, str(wheel)], check=True)
    return env_dir / "bin"


def test_wheel_maps_folders_into_the_sparktap_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"sparktap"}
    for expected in (
        "sparktap/listener/jars/sparktap-listener-spark3_2.12.jar",
        "sparktap/listener/jars/sparktap-listener-spark4_2.13.jar",
        "sparktap/listener/java/io/sparktap/listener/redaction-patterns.txt",  # the relay loads it (redaction.py)
        "sparktap/schemas/jsonschema/events.schema.json",
        "sparktap/schemas/events.py",
        "sparktap/collector/__init__.py",
        "sparktap/dashboards/__init__.py",
        "sparktap/py.typed",
    ):
        assert expected in names
    for line in ("spark3_2.12", "spark4_2.13"):
        jar = zipfile.ZipFile(wheel).read(f"sparktap/listener/jars/sparktap-listener-{line}.jar")
        assert jar[:2] == b"PK"


def test_wheel_installs_and_imports_in_a_fresh_venv(installed: Path, tmp_path: Path) -> None:
    python = installed / "python"
    code = (
        "import sparktap.schemas, sparktap.collector, sparktap.listener, sparktap.dashboards, importlib.util;"
        "assert importlib.util.find_spec('schemas') is None;"
        "print(sparktap.schemas.SCHEMA_VERSION)"
    )
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert result.stdout == "1\n"
    cli = subprocess.run([str(installed / "sparktap"), "version"], capture_output=True, text=True, check=True)
    assert cli.stdout.startswith("sparktap ")


DEMO_SERVICES = {
    "sparktap/local/__init__.py",
    "sparktap/local/broker.py",  # the demo's tansu broker
    "sparktap/local/ports.py",
    "sparktap/local/service.py",
}
"""All of ``sparktap/local/`` in the wheel: the test services live in tests/support/services/, outside it."""


def _imported_modules(source: bytes) -> set[str]:
    """Every absolute module an import statement names, wherever it stands (functions and type-only blocks too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_wheel_ships_the_demo_services_and_no_test_bench(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n for n in names if n.startswith("sparktap/local/")} == DEMO_SERVICES
    modules = [n for n in names if n.endswith(".py")]
    assert len(modules) > 100  # the whole package was read, not an empty listing
    with zipfile.ZipFile(wheel) as archive:
        importing = {
            f"{name}: {module}"
            for name in modules
            for module in _imported_modules(archive.read(name))
            if module.split(".")[0] in {"tests", "bench"}
        }
    assert importing == set()


def test_the_command_and_the_demo_modules_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """From outside the checkout (whose folders would shadow the installed package), without the demo extra."""
    cli = subprocess.run(
        [str(installed / "sparktap"), "--help"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert (cli.returncode, cli.stderr) == (0, "")
    assert cli.stdout.startswith("Usage: sparktap [OPTIONS] COMMAND [ARGS]...\n")
    commands = re.findall(r"^  ([a-z-]+) ", cli.stdout.split("Commands:\n", 1)[1], flags=re.MULTILINE)
    assert {"collect", "demo", "import", "findings", "report", "version"} <= set(commands)
    code = (
        "import importlib.util, sparktap.local.broker, sparktap.demo.runner;"
        "print(sparktap.local.broker.__file__);"
        "print([m for m in ('sparktap.local.kafka', 'sparktap.local.tls', 'sparktap.local.clickhouse', 'tests')"
        " if importlib.util.find_spec(m)])"
    )
    result = subprocess.run(
        [str(installed / "python"), "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    broker, found = result.stdout.splitlines()
    assert broker.endswith("/site-packages/sparktap/local/broker.py") and broker.startswith(str(installed.parent))
    assert found == "[]"


RELAY_MODULES = [
    "sparktap/__init__.py",
    "sparktap/errors.py",
    "sparktap/launcher.py",
    "listener/__init__.py",
    "listener/__main__.py",
    "listener/relay.py",
    "listener/relay_config.py",
    "listener/spool.py",
    "listener/redaction.py",
    "listener/drain.py",
]
"""Every module the relay, ``python -m sparktap.listener`` and the ``sparktap`` launcher import on a driver host."""


def test_the_relay_modules_run_on_python_3_9() -> None:
    """A static check (vermin) of every module the relay imports: nothing newer than Python 3.9."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "vermin"), "--target=3.9-", "--violations", "--eval-annotations",
         "--no-tips", "--backport", "typing", *RELAY_MODULES],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_relay_imports_nothing_but_the_standard_library_and_confluent_kafka() -> None:
    """Run in a fresh interpreter: after importing the relay, no third-party module but confluent_kafka is loaded."""
    code = (
        "import sys, sysconfig\n"
        "import sparktap.listener.relay, sparktap.listener.drain, sparktap.listener\n"
        "stdlib = sysconfig.get_paths()['stdlib']\n"
        "third = sorted({n.split('.')[0] for n, m in list(sys.modules.items())\n"
        "    if getattr(m, '__file__', None) and 'site-packages' in m.__file__})\n"
        "print(','.join(third))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # besides sparktap itself and the packaging hooks of an editable install
    hooks = {"sparktap", "_distutils_hack", "__editable___sparktap_0_1_0_finder"}
    assert set(proc.stdout.strip().split(",")) - hooks == {"confluent_kafka"}


def _python39() -> Path:
    import shutil

    from tests.fixtures.services import unavailable

    candidates = sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))
    found = shutil.which("python3.9")  # may be a pyenv shim that refuses: try it last
    for candidate in [*candidates, *([Path(found)] if found else [])]:
        if subprocess.run([str(candidate), "-c", "import venv"], capture_output=True, check=False).returncode == 0:
            return candidate
    unavailable("python 3.9", "no python3.9 on PATH or under ~/.pyenv/versions: install one to check the relay floor")


def test_the_relay_installs_with_one_pip_install_and_runs_on_python_3_9(
    tmp_path: Path, kafka_broker: KafkaService
) -> None:
    """A driver host with Python 3.9: one `pip install` of the package brings the jars, the relay and
    confluent-kafka, nothing else; the jar path prints without click; the relay delivers to a real broker."""
    py39 = _python39()
    build = tmp_path / "build-venv"
    subprocess.run([str(py39), "-m", "venv", str(build)], check=True)
    pip = [str(build / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "setuptools>=68", "wheel"], check=True)
    dist = tmp_path / "dist"
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)], check=True)
    (wheel,) = dist.glob("sparktap-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")  # no compiled collector part on 3.9

    host = tmp_path / "driver-venv"
    subprocess.run([str(py39), "-m", "venv", str(host)], check=True)
    python = str(host / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    freeze = subprocess.run([python, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True)
    installed = {re.split(r"==| @ ", line)[0].lower().replace("_", "-") for line in freeze.stdout.splitlines()}
    show = subprocess.run([python, "-m", "pip", "show", "confluent-kafka"], capture_output=True, text=True, check=True)
    (requires,) = [line for line in show.stdout.splitlines() if line.startswith("Requires:")]
    own = {r.strip().lower().replace("_", "-") for r in requires.split(":", 1)[1].split(",") if r.strip()}
    assert installed - {"pip", "setuptools", "wheel"} == {"sparktap", "confluent-kafka"} | own

    jar = subprocess.run(
        [python, "-m", "sparktap.listener", "--spark-version", "3.4"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the repository, whose folders would shadow the installed package
    ).stdout.strip()
    assert jar.endswith("/site-packages/sparktap/listener/jars/sparktap-listener-spark3_2.12.jar")
    assert Path(jar).is_file()
    cli = subprocess.run(
        [str(host / "bin" / "sparktap"), "version"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert cli.returncode == 2
    assert cli.stderr.startswith("error: the sparktap command needs Python 3.11 or newer, this is 3.9")

    from tests.fixtures.listener import new_topic, read_all

    topic = new_topic(kafka_broker.bootstrap_servers)
    kafka = {"bootstrap.servers": kafka_broker.bootstrap_servers}
    config = {"protocol": 1, "app_id": "app-py39", "topic": topic, "kafka": kafka, "spool_dir": str(tmp_path / "spool")}
    events = [{"schema_version": 1, "event_type": "task_end", "seq": i} for i in (1, 2, 3)]
    lines = [json.dumps(config)] + [json.dumps(e) for e in events]
    relay = subprocess.run(
        [python, "-m", "sparktap.listener.relay", "--app-id", "app-py39"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert relay.returncode == 0, relay.stderr
    statuses = [json.loads(line) for line in relay.stdout.splitlines()]
    assert statuses[0]["status"] == "ready" and statuses[-1]["status"] == "exit"
    assert (statuses[-1]["received"], statuses[-1]["delivered"], statuses[-1]["lost"]) == (3, 3, 0)
    records = read_all(kafka_broker.bootstrap_servers, topic, 30.0, until=lambda r: len(r) >= 3, settle=0.3)
    assert sorted(json.loads(r.value or b"")["seq"] for r in records) == [1, 2, 3]
    assert {r.key for r in records} == {b"app-py39"}
