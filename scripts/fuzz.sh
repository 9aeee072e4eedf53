#!/usr/bin/env bash
# Fuzz the bundle reader and the API surface with libFuzzer: build the targets with clang (ASan +
# UBSan, coverage in the whole library), run both side by side for SECONDS each (default 60) from
# the committed seed corpora, and fail on any crash, leak, timeout or sanitizer report.
#   ./scripts/fuzz.sh [SECONDS]     env: FUZZ_BUILD_DIR (build-fuzz), JOBS
# A finding leaves its input as build-fuzz/fuzz-<target>/crash-* (or leak-*, timeout-*): copy it to
# tests/fuzz/regressions/<target>/ so that ctest replays it from then on.
set -euo pipefail
source "$(dirname "$0")/common.sh"
secs=${1:-60}
build=${FUZZ_BUILD_DIR:-$mlav_root/build-fuzz}

command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang libclang-rt-14-dev libomp-dev)" >&2; exit 1; }
# no CUDA, no CLI or bench: the targets link the library and the bundle code only
mkdir -p "$build"
CC=clang cmake -S "$mlav_root" -B "$build" -DMLAV_CUDA=OFF -DMLAV_FUZZ=ON \
  -DMLAV_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_CLI=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target fuzz_bundle fuzz_api

# Two OpenMP threads: the CPU backend's split-KV and merge paths run as they do in production.
# Passive waiting: the two fuzzers share the cores, and spinning idle workers would halve both.
export OMP_NUM_THREADS=2
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pids=()
for t in bundle api; do
  work="$build/fuzz-$t"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  # new inputs go to the scratch corpus (first directory); the committed ones are only read.
  # -timeout: one input may take 10 s (a sanitized oracle over the largest allowed problem is
  # far below that); -rss_limit_mb: well under CI's memory; -max_len: api programs of up to
  # 64 KiB, bundles of up to 1 MiB, so that the header of tens of thousands of metadata keys and
  # the 4096-node request (issue 26) are inputs it can hold; -malloc_limit_mb: no single
  # allocation for a bundle of at most 1 MiB may pass 256 MiB (the readout's T x vocab doubles
  # and a dense mask of a 100k-node chain did); -dict: the tokens of the header's structure and
  # the spellings safetensors refuses, so mutations make them.
  extra=(-max_len=65536)
  if [ "$t" = bundle ]; then
    extra=(-max_len=1048576 -malloc_limit_mb=256 -dict="$mlav_root/tests/fuzz/bundle.dict")
  fi
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    "${extra[@]}" -print_final_stats=1 -error_exitcode=77 -artifact_prefix="$work/" \
    "$work/corpus" "$mlav_root/tests/fuzz/corpus_$t" "$mlav_root/tests/fuzz/regressions/$t" \
    >"$work.log" 2>&1 &
  pids+=($!)
done
status=0
i=0
for t in bundle api; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  i=$((i + 1))
  log="$build/fuzz-$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2)
  corpus=$(find "$build/fuzz-$t/corpus" -type f | wc -l)
  if [ "$rc" = 0 ]; then
    echo "fuzz_$t: ${execs:-?} executions in ${secs} s (${rate:-?}/s), coverage ${cov:-?} edges, $corpus new corpus inputs: clean"
  else
    status=1
    echo "fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; the log ends:"
    tail -n 60 "$log"
    ls "$build/fuzz-$t"/crash-* "$build/fuzz-$t"/leak-* "$build/fuzz-$t"/timeout-* \
       "$build/fuzz-$t"/oom-* 2>/dev/null || true
  fi
done
exit $status
