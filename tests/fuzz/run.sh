#!/usr/bin/env bash
# Builds and runs the libFuzzer target of the collector's C reader (tests/fuzz/flatjson_fuzz.c) under
# AddressSanitizer + UndefinedBehaviorSanitizer, then measures the corpus's coverage of the reader (native/_flatjson.c, native/_flatjson_read.c).
#
#   tests/fuzz/run.sh build                 # build/fuzz/flatjson_fuzz (sanitizers) and flatjson_cov (coverage)
#   tests/fuzz/run.sh fuzz SECONDS [JOBS]   # fuzz from the seed corpus; new inputs go to build/fuzz/corpus
#   tests/fuzz/run.sh coverage              # llvm-cov report of the reader over seeds + build/fuzz/corpus
#   tests/fuzz/run.sh merge                 # add to the checked-in seeds the found inputs that add coverage
#
# Needs clang, libclang-rt-dev (libFuzzer, sanitizer runtimes) and llvm (llvm-profdata, llvm-cov): .ci/system-deps.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${SPARKTAP_FUZZ_OUT:-$root/build/fuzz}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$out/corpus"
cfg() { "$py" -c "import sysconfig as s; print(s.$1)"; }
include="$(cfg "get_paths()['include']")"
libdir="$(cfg "get_config_var('LIBDIR')")"
pylib="$(cfg "get_config_var('LDVERSION')")"
export SPARKTAP_FUZZ_SITE="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export SPARKTAP_FUZZ_DIR="$here"
export PYTHONMALLOC=malloc  # Python's allocations through malloc: ASan sees them
# Python's interpreter keeps memory at exit by design: leak reports would be about it, not the reader
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:symbolize=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
cc="${CC:-clang}"
common=(-g -I"$include" "$here/flatjson_fuzz.c" -L"$libdir" -lpython"$pylib" -Wl,-rpath,"$libdir")
llvm_tool() { for t in "$1" "$1-19" "$1-16" "$1-15" "$1-14"; do command -v "$t" >/dev/null && { echo "$t"; return; }; done
              echo "missing $1 (apt-get install llvm)" >&2; exit 2; }

build() {
  "$cc" -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    "${common[@]}" -o "$out/flatjson_fuzz"
  "$cc" -O0 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping "${common[@]}" -o "$out/flatjson_cov"
}

fuzz() {
  local seconds="${1:-120}" jobs="${2:-1}"
  [ -x "$out/flatjson_fuzz" ] || build
  local parallel=()
  # several jobs: libFuzzer forks workers, each logging to fuzz-N.log in the current directory (cd to $out)
  [ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
  (cd "$out" && "$out/flatjson_fuzz" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
    -dict="$here/json.dict" "${parallel[@]}" -print_final_stats=1 \
    -artifact_prefix="$out/" "$out/corpus" "$here/corpus")
}

coverage() {
  [ -x "$out/flatjson_cov" ] || build
  rm -f "$out"/cov-*.profraw
  LLVM_PROFILE_FILE="$out/cov-%p.profraw" SPARKTAP_FUZZ_DECODE=0 \
    "$out/flatjson_cov" -runs=0 -artifact_prefix="$out/" "$here/corpus" "$out/corpus" >"$out/coverage-run.log" 2>&1
  "$(llvm_tool llvm-profdata)" merge -sparse "$out"/cov-*.profraw -o "$out/flatjson.profdata"
  "$(llvm_tool llvm-cov)" report "$out/flatjson_cov" -instr-profile="$out/flatjson.profdata" \
    -show-region-summary=false "$root/native/_flatjson.c" "$root/native/_flatjson_read.c" | tee "$out/coverage.txt"
  "$(llvm_tool llvm-cov)" show "$out/flatjson_cov" -instr-profile="$out/flatjson.profdata" -show-branches=count \
    "$root/native/_flatjson.c" "$root/native/_flatjson_read.c" >"$out/coverage-lines.txt"
}

merge() {
  [ -x "$out/flatjson_fuzz" ] || build
  (cd "$out" && "$out/flatjson_fuzz" -merge=1 -max_len=8192 -timeout=10 -rss_limit_mb=4096 "$here/corpus" "$out/corpus")
}

case "${1:-}" in
  build) build ;;
  fuzz) shift; fuzz "$@" ;;
  coverage) coverage ;;
  merge) merge ;;
  *) echo "usage: $0 build | fuzz SECONDS [JOBS] | coverage | merge" >&2; exit 2 ;;
esac
