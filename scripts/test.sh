#!/usr/bin/env bash
# The test command: set up and build if needed, then run the whole suite
# (build/). Then the CUDA and NCCL tests a second time, in a build against the CUDA
# emulator (build-emu/, -DGPT_CUDA_EMULATOR=ON, tests/cuda_emulator/): there
# the CUDA kernels run on the CPU, so their parity tests run without a GPU.
#   scripts/test.sh                  both parts
#   scripts/test.sh -R Tokenizer     ctest arguments: the first part only
#   GPT_TEST_EMULATOR=0|1            skip the emulator part / run it even with arguments
#                                    (its own fixed set of tests, not the arguments)
#   GPT_TEST_FUZZ=SECONDS            then fuzz every parser for SECONDS each (scripts/fuzz.sh);
#                                    without it only the seed corpora run (ctest -R Fuzz)
#   scripts/test.sh --sanitize [ctest arguments]
#                                    the whole suite (CUDA kernels on the emulator included)
#                                    built with AddressSanitizer + UndefinedBehaviorSanitizer
#                                    into build-asan/; any report fails its test
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--sanitize" ]; then
  shift
  scripts/setup.sh --packages  # the sanitizer build is its own
  if [ ! -f build-asan/CMakeCache.txt ]; then
    cmake -S . -B build-asan -G "$(scripts/generator.sh)" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPT_SANITIZE=ON -DGPT_CUDA_EMULATOR=ON >/dev/null
  fi
  cmake --build build-asan -j"$(nproc)"
  # Leaks inside Open MPI's and OpenMP's runtimes are theirs
  # (tests/sanitizer/lsan.supp); allocator_may_return_null lets a too-large
  # model fail as std::bad_alloc (the message under test) instead of an abort.
  # Open MPI unloads its components (mca_*.so) at exit, which leaves their
  # leaks without a library name to suppress: keep them loaded, and unwind
  # fully (the runtimes are built without frame pointers).
  export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:abort_on_error=1:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
  exit
fi

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
  # Only the CUDA, NCCL and emulator tests are built there (GPT_TESTS_CUDA_ONLY).
  generator=()
  if [ ! -f build-emu/CMakeCache.txt ]; then generator=(-G "$(scripts/generator.sh)"); fi
  cmake -S . -B build-emu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA_EMULATOR=ON -DGPT_TESTS_CUDA_ONLY=ON >/dev/null
  cmake --build build-emu -j"$(nproc)" --target gpt gpt_tests
  # Blocks run in a seeded shuffle (a new order at every launch), two at a
  # time interleaved at their barriers, then the
  # kernel parity tests once more in reverse order: a kernel whose blocks
  # race through global memory gives order-dependent results (docs/gpu.md).
  GPT_EMU_BLOCK_ORDER=${GPT_EMU_BLOCK_ORDER:-shuffle:1} GPT_EMU_INTERLEAVE=${GPT_EMU_INTERLEAVE:-2} \
    ctest --test-dir build-emu --output-on-failure -j"$(nproc)" -R 'Cuda|Nccl|WorldForDevice'
  echo "test: the kernel parity tests again with the blocks in reverse order"
  GPT_EMU_BLOCK_ORDER=reverse ctest --test-dir build-emu --output-on-failure -j"$(nproc)" -R 'CudaOps|CudaAttention|CudaMmaLayout|CudaBf16Native'
fi

if [ -n "${GPT_TEST_FUZZ:-}" ]; then
  echo "test: fuzzing every parser for ${GPT_TEST_FUZZ} s each (build-fuzz/)"
  scripts/fuzz.sh "$GPT_TEST_FUZZ"
fi
