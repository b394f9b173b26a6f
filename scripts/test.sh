#!/usr/bin/env bash
# The test command: set up and build if needed, then run the whole suite
# (build/). Then the CUDA and NCCL tests a second time, in a build against the CUDA
# emulator (build-emu/, -DGPT_CUDA_EMULATOR=ON, kernels/cuda/emulator/): there
# the CUDA kernels run on the CPU, so their parity tests run without a GPU.
#   scripts/test.sh                  both parts
#   scripts/test.sh -R Tokenizer     ctest arguments: the first part only
#   GPT_TEST_EMULATOR=0|1            skip the emulator part / run it even with arguments
#                                    (its own fixed set of tests, not the arguments)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"

emulator=${GPT_TEST_EMULATOR:-}
if [ -z "$emulator" ]; then
  if (($#)); then emulator=0; else emulator=1; fi
fi
case "$emulator" in
  0 | 1) ;;
  *) echo "test: GPT_TEST_EMULATOR must be 0 or 1, not \"$emulator\"" >&2; exit 2 ;;
esac
if [ "$emulator" = 1 ]; then
  echo "test: the CUDA tests on the CUDA emulator (build-emu/)"
  cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA_EMULATOR=ON >/dev/null
  cmake --build build-emu -j"$(nproc)" --target gpt gpt_tests
  ctest --test-dir build-emu --output-on-failure -j"$(nproc)" -R 'Cuda|Nccl|WorldForDevice'
fi
