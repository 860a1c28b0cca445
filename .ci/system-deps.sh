#!/usr/bin/env bash
# Installs the system packages the suite needs when they are missing (root only; otherwise says what to install).
# `system-deps.sh demo`: only what `make demo` needs, a JDK (java runs pyspark, javac builds the listener jar) and
# Maven (merges the Kafka client into that jar; the suite also fetches Apache Kafka's jars with it); the
# collector's C reader is compiled when a C compiler and the Python headers are there, else its pure-Python path runs.
set -euo pipefail
mode=${1:-all}

install_missing() {  # the packages to install, as arguments
  if [ $# -eq 0 ]; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: $* (run as root, or: sudo apt-get install $*)" >&2
    if [ "$mode" = demo ]; then exit 1; fi
    echo "tests that need them will be skipped (or fail under SPARKTAP_REQUIRE_SERVICES=1)" >&2
    return 0
  fi
  echo "installing system packages: $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The package's own service start is refused in containers (policy-rc.d); tests start their own server.
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
# shades the Kafka client into the listener jar (listener/javabuild.py), for the demo too
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ "$mode" = demo ]; then
  install_missing "${need[@]}"
  exit 0
fi
command -v gcc >/dev/null 2>&1 || need+=(gcc)  # compiles the collector's C reader (native/_flatjson.c)
# …against the headers of the Python the venv is made from
has_headers='import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'
"${PYTHON:-python3}" -c "$has_headers" 2>/dev/null || need+=(python3-dev)
command -v clickhouse-server >/dev/null 2>&1 || need+=(clickhouse-server clickhouse-client)
# the ClickHouse cluster of the tests (tests/support/services/cluster.py): Debian's ZooKeeper, run from its jar
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # renders `sparktap report` pages in tests/integration/test_report.py
# the C reader's fuzz target (tests/fuzz/run.sh): clang with libFuzzer and the ASan/UBSan runtimes, llvm-cov
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -e "$(clang --print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a" ] || need+=(libclang-rt-dev)
command -v llvm-profdata >/dev/null 2>&1 || need+=(llvm)
install_missing "${need[@]}"
