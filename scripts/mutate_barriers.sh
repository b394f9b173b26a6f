#!/usr/bin/env bash
# Mutation check of the CUDA tests on the CUDA emulator: removes each
# __syncthreads() of kernels/cuda/ in turn, in a copy of the tree, rebuilds
# against the emulator and runs the CUDA tests; prints which tests fail per
# removed barrier. Every barrier should make some test fail ("NONE" means
# the tests, or the emulator's scheduling, cannot see that barrier's race).
#   scripts/mutate_barriers.sh                       every barrier (about 30 s each on 2 cores, after a full build)
#   scripts/mutate_barriers.sh kernels/cuda/layernorm.cu:77 ...   only these lines
# WORK_DIR (default /tmp/gpt_mutate_barriers) holds the copy and its build.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${WORK_DIR:-/tmp/gpt_mutate_barriers}
mkdir -p "$work/src"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$work/src"
cd "$work/src"
cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA_EMULATOR=ON >/dev/null
echo "mutate: building the unmutated tree into $work/build"
cmake --build "$work/build" -j"$(nproc)" --target gpt gpt_tests >/dev/null
tests() { timeout 900 "$work/build/gpt_tests" --gtest_filter='Cuda*' 2>&1 || true; }
base=$(tests | grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' | tr '\n' ' ' || true)
echo "mutate: unmutated: $base"
case "$base" in *PASSED*) ;; *) echo "mutate: the unmutated tree does not pass the CUDA tests; nothing to compare" >&2; exit 1 ;; esac
case "$base" in *FAILED*) echo "mutate: the unmutated tree does not pass the CUDA tests; nothing to compare" >&2; exit 1 ;; esac
if (($#)); then sites=("$@"); else mapfile -t sites < <(grep -n '__syncthreads();' kernels/cuda/*.cu kernels/cuda/*.cuh kernels/cuda/attention/*.cuh | cut -d: -f1,2); fi
for site in "${sites[@]}"; do
  file=${site%%:*} line=${site##*:}
  cp "$file" "$work/original"
  sed -i "${line}s/__syncthreads();/\/* barrier removed *\//" "$file"
  if cmp -s "$file" "$work/original"; then echo "$site: no __syncthreads() on that line"; continue; fi
  if cmake --build "$work/build" -j"$(nproc)" --target gpt_tests >/dev/null 2>&1; then
    failing=$(tests | { grep -E '^\[  FAILED  \] [A-Z]' || true; } | sed 's/^\[  FAILED  \] //; s/ (.*//' | sort -u | tr '\n' ' ')
    echo "$site: failing: ${failing:-NONE}"
  else
    echo "$site: the build failed"
  fi
  cp "$work/original" "$file"
done
# Leave the copy unmutated for the next run's incremental build.
cmake --build "$work/build" -j"$(nproc)" --target gpt_tests >/dev/null
