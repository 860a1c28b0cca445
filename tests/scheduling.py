"""The suite's module order for `make test`'s two xdist workers, and each worker's busy time at the end.

`--dist loadfile` hands a worker one whole module at a time, in the order of the workers' collection; by default
xdist reorders the modules by their number of tests, which put the few-test, several-minute integration modules
last, and one worker ran them while the other had finished. Here the modules are ordered longest first by the
checked-in table `tests/durations.json` (seconds per module, setup + call + teardown of its tests, measured in a
`make test` run), so the long modules start first and the short ones fill the end of both workers (the longest-first
rule for two machines). A module not in the table counts as `DEFAULT_SECONDS` of its folder: an unknown
integration or e2e module goes first.

`make test UPDATE_DURATIONS=1` (`--update-durations`) rewrites the table from the run's measurements. The summary
prints each worker's busy time and when its last test ended, so an imbalance shows in every run.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS_PATH = Path(__file__).with_name("durations.json")
# A module the table does not know yet (new since the last refresh) starts first: if it is long (a new Spark module
# runs for minutes), started last it would end alone on one worker while the other idles; if it is short, starting it
# early costs nothing, the short known modules still fill the end of both workers.
UNKNOWN_FIRST = 10_000.0
DEFAULT_SECONDS = {"tests/unit": 1.0, "tests/integration": UNKNOWN_FIRST, "tests/e2e": UNKNOWN_FIRST}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-durations",
        action="store_true",
        default=False,
        help=f"rewrite {DURATIONS_PATH.name} (module order for xdist) from this run's per-module durations",
    )


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = DURATIONS_PATH) -> dict[str, float]:
    if not path.exists():
        return {}
    table = json.loads(path.read_text())
    return {str(name): float(seconds) for name, seconds in table["modules"].items()}


def expected_seconds(module: str, table: dict[str, float]) -> float:
    if module in table:
        return table[module]
    folder = module.rsplit("/", 1)[0]
    return DEFAULT_SECONDS.get(folder, 1.0)


def _distributing(config: pytest.Config) -> bool:
    """On the xdist controller of a `--dist loadfile` run."""
    return str(config.getoption("dist", "no")) in ("loadfile", "loadscope")


def _xdist_worker(config: pytest.Config) -> bool:
    # xdist sets a worker's `dist` option to "no"; its collection is the order the controller hands modules out.
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if _xdist_worker(config):
        return
    if _distributing(config):
        # xdist's default reorders the modules by their number of tests; keep the order set below.
        config.option.loadscopereorder = False
    if _distributing(config) or config.getoption("update_durations"):
        config.pluginmanager.register(WorkerTimes(config), "sparktap-worker-times")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _xdist_worker(config):
        return
    table = load_durations()
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        first_index.setdefault(_module(item.nodeid), index)
    # Stable: a module's tests keep their order; modules longest first, ties in collection order.
    items.sort(key=lambda item: (-expected_seconds(_module(item.nodeid), table), first_index[_module(item.nodeid)]))


class WorkerTimes:
    """On the xdist controller (or in a run without xdist): seconds per module and per worker from the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.module_seconds: dict[str, float] = defaultdict(float)
        self.busy: dict[str, float] = defaultdict(float)
        self.modules: dict[str, list[str]] = defaultdict(list)
        self.last_report: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # the xdist worker that ran it; None in a run without xdist
        worker = str(node.gateway.id) if node is not None else "main"
        module = _module(report.nodeid)
        self.module_seconds[module] += report.duration
        self.busy[worker] += report.duration
        if not self.modules[worker] or self.modules[worker][-1] != module:
            self.modules[worker].append(module)
        self.last_report[worker] = time.monotonic() - self.started

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.busy:
            return
        terminalreporter.section("worker busy time")
        for worker in sorted(self.busy):
            last = self.modules[worker][-1]
            terminalreporter.write_line(
                f"{worker}: busy {self.busy[worker]:.0f} s in {len(self.modules[worker])} modules, "
                f"last test ended at {self.last_report[worker]:.0f} s (its last module: {last})"
            )
        if self.config.getoption("update_durations"):
            table = load_durations()
            table.update({module: round(seconds, 1) for module, seconds in self.module_seconds.items()})
            write_durations(table)
            terminalreporter.write_line(f"wrote {len(table)} module durations to {DURATIONS_PATH}")


def write_durations(table: dict[str, float], path: Path = DURATIONS_PATH) -> None:
    existing = {str(p.relative_to(path.parent.parent)) for p in path.parent.rglob("test_*.py")}
    modules = {name: seconds for name, seconds in sorted(table.items()) if name in existing}
    document = {
        "about": "seconds per test module (setup + call + teardown) in a `make test` run; tests/scheduling.py "
        "orders the modules longest first for the xdist workers; refresh: make test UPDATE_DURATIONS=1",
        "modules": modules,
    }
    path.write_text(json.dumps(document, indent=1) + "\n")
