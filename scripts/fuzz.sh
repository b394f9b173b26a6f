#!/usr/bin/env bash
# Fuzzes every parser with libFuzzer (tests/fuzz/fuzz_NAME.cpp), in a clang
# build with AddressSanitizer + UndefinedBehaviorSanitizer (build-fuzz/,
# -DGPT_FUZZ=ON), each target for SECONDS starting from its seed corpus
# (tests/fuzz/corpus/NAME/, copied: the seeds in the tree stay as they are).
#   scripts/fuzz.sh                 every target, 30 s each
#   scripts/fuzz.sh 300 checkpoint  one target, 5 minutes
# Prints per target: executions, coverage (edges), features, corpus size and
# findings; a finding (crash, sanitizer report, leak, timeout, out-of-memory)
# is saved under build-fuzz/findings/NAME/ and makes the script exit 1.
# Replay one with build-fuzz/gpt_fuzz_NAME FILE. The seed corpora alone run in
# the normal suite (ctest -R Fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
shift || true
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz: SECONDS must be a whole number of seconds, not \"$seconds\"" >&2; exit 2 ;;
esac

GPT_EXTRA_PACKAGES="clang libomp-dev" scripts/setup.sh --packages

BUILD=${GPT_FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPT_FUZZ=ON \
    -DGPT_BUILD_TESTS=OFF -DGPT_CUDA=OFF -DGPT_MPI=OFF -DGPT_NCCL=OFF >/dev/null
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$f" .cpp)
    targets+=("${n#fuzz_}")
  done
fi
for t in "${targets[@]}"; do
  [ -f "tests/fuzz/fuzz_$t.cpp" ] || { echo "fuzz: no target \"$t\" (tests/fuzz/fuzz_$t.cpp)" >&2; exit 2; }
done
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]/#/gpt_fuzz_}"

status=0
printf '%-12s %10s %8s %8s %8s %9s\n' target execs cov ft corpus findings
for t in "${targets[@]}"; do
  corpus="$BUILD/corpus/$t" findings="$BUILD/findings/$t" log="$BUILD/fuzz_$t.log"
  mkdir -p "$corpus" "$findings"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  # The sweep target reads configs/ by relative path: run from the tree.
  rc=0
  ASAN_OPTIONS=detect_leaks=1 "$BUILD/gpt_fuzz_$t" "$corpus" -max_total_time="$seconds" -rss_limit_mb=4096 \
    -timeout=20 -max_len=65536 \
    -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  [ -n "$done_line" ] || done_line=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1 || true)
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || echo "?")
  cov=$(grep -oE 'cov: [0-9]+' <<<"$done_line" | grep -oE '[0-9]+' || echo "?")
  ft=$(grep -oE 'ft: [0-9]+' <<<"$done_line" | grep -oE '[0-9]+' || echo "?")
  n_corpus=$(find "$corpus" -type f | wc -l)
  n_findings=$(find "$findings" -type f | wc -l)
  printf '%-12s %10s %8s %8s %8s %9s\n' "$t" "$execs" "$cov" "$ft" "$n_corpus" "$n_findings"
  if ((rc != 0 || n_findings > 0)); then
    status=1
    echo "fuzz: $t: exit $rc; log $log; findings in $findings/" >&2
    grep -E 'ERROR|SUMMARY|property violated|Test unit written' "$log" | head -5 >&2 || true
  fi
done
exit $status
