#!/usr/bin/env bash
# One check of the CUDA backend on a GPU machine that has CUDA (nvcc, cuBLAS),
# CMake and a C++ compiler but none of our Debian packages and no network:
#   1. configure and build (Release, CUDA on, MPI off) against the packages
#      unpacked by scripts/fetch_gpu_deps.sh into third_party/deb/;
#      NCCL from the CUDA toolkit or, failing that, from the image's Python
#      package nvidia-nccl-cu13 (without MPI: the NCCL communicator for one rank);
#   2. check the tensor-core fragment layouts against the GPU (*MmaLayout.*),
#      then run every CUDA parity test, the one-rank NCCL tests and the kernels'
#      ptxas resource check for CUDA_ARCH (gtest filter GPU_TEST_FILTER,
#      default below);
#   3. train the quickstart model on cuda for a few hundred steps (data: the
#      repository's own text, byte tokens) in fp32, again with bf16 GEMM
#      operands (run.precision=bf16) and again with bf16 storage too
#      (run.storage=bf16; final losses side by side), and a few
#      steps on cpu, and compare the first losses of cpu and cuda fp32; evaluate
#      the cuda run with YaRN + sinks + Llama 4's temperature and with ReRoPE + YaRN
#      on both devices; train
#      50 steps on one GPU plainly and through NCCL (GPT_DIST_NCCL=1: broadcast,
#      overlapped all-reduce) and compare every loss;
#   4. run `gpt bench --device cuda` on GPT-2 small (configs/gpt2_small_cuda.json),
#      --precision fp32, tf32 and bf16 (and bf16 with run.storage=bf16), and its
#      evaluation memory at 1x-16x
#      (configs/gpt2_fineweb/softmax.json, RoPE);
#   5. time the softmax and lssar attention kernels at T = 1K-16K against cuDNN's
#      fused attention (bf16; cuDNN from the toolkit or the image's Python
#      package nvidia-cudnn-cu13, cudnn-frontend from third_party/cudnn_frontend/):
#      our softmax time over cuDNN's per T;
#   6. time the contenders (softmax1, sink, softpick, stick-breaking, and
#      softmax with the KERPLE log bias and the forget gate) beside softmax at
#      T = 4K and 16K:
#      their forward+backward time over softmax's;
#   7. run a few kernel tests under compute-sanitizer's memcheck, racecheck
#      and synccheck (SANITIZER=0 skips it; SANITIZER_TOOLS picks the tools;
#      SANITIZER_SECONDS per tool, default 150);
# then print a compact table. About 6-9 minutes on an H200 machine with 16 cores
# (the build and the parity tests take most of it; each training run and
# bench row is well under a minute).
# Logs go to build-gpu/check/. Exit status 0 only if every step passed.
#
# usage: scripts/gpu_check.sh            (see docs/gpu.md)
# env:   DEPS=third_party/deb  BUILD=build-gpu  JOBS=$(nproc)  CUDA_ARCH=90
#        GPU_TEST_FILTER='*Cuda*:Nccl.*:WorldForDevice.*:PtxasResources.*-(the tests that need MPI or no GPU)'
#        TRAIN_STEPS=300  BENCH_STEPS=3
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
deps=$(realpath -m "${DEPS:-third_party/deb}")
build=${BUILD:-build-gpu}
jobs=${JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
# Skipped on purpose: the mpirun test and its child (this build has no MPI)
# and the no-device error test (there is a device).
filter=${GPU_TEST_FILTER:-*Cuda*:Nccl.*:WorldForDevice.*:PtxasResources.*-Nccl.OneRankUnderMpirun:NcclChild.*:Nccl.NoDeviceIsAClearError}
train_steps=${TRAIN_STEPS:-300}
bench_steps=${BENCH_STEPS:-3}
logs=$build/check
start=$(date +%s)

declare -a rows=()
status=0
# Each row is printed when it is made too, so a run cut short still shows them.
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "$3")"); echo "-- ${rows[-1]}"; }
failed() { status=1; row "$1" FAIL "$2"; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

# ---- 0. tools and dependencies ------------------------------------------------------
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
command -v nvcc >/dev/null || { echo "error: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "error: cmake not found" >&2; exit 1; }
[ -d "$deps/usr/include/nlohmann" ] || {
  echo "error: $deps holds no unpacked dependencies; run scripts/fetch_gpu_deps.sh on a Debian machine with" \
       "network first and bring the folder along (docs/gpu.md)" >&2
  exit 1
}
libdir=$deps/usr/lib/x86_64-linux-gnu
# spdlog's shared library needs fmt's at run time (also when gtest lists the
# tests during the build); the executables' RUNPATH covers only their own.
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL and cuDNN (gpt bench's reference for attention): CMake finds the CUDA
# toolkit's; where the toolkit has no HEADER, the image's Python package
# nvidia-MODULE-cu13 may carry it. from_python MODULE HEADER LIB VAR then adds
# -DVAR_INCLUDE_DIR/-DVAR_LIBRARY to lib_args, its lib folder to
# LD_LIBRARY_PATH, and sets `from` to where the library comes from.
lib_args=()
from_python() {
  local dir file
  from="the CUDA toolkit"
  [ -f "$(dirname "$(command -v nvcc)")/../include/$2" ] || [ -f "/usr/include/$2" ] && return
  dir=$(python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  file=$(ls "$dir/lib/$3".so* 2>/dev/null | head -1)
  if [ -n "$dir" ] && [ -f "$dir/include/$2" ] && [ -n "$file" ]; then
    lib_args+=(-D"$4"_INCLUDE_DIR="$dir/include" -D"$4"_LIBRARY="$file")
    export LD_LIBRARY_PATH="$dir/lib:$LD_LIBRARY_PATH"
    from="Python's nvidia-$1 ($dir)"
  else
    from="nowhere"
  fi
}
from_python nccl nccl.h libnccl NCCL
nccl_from=$from
from_python cudnn cudnn.h libcudnn CUDNN
cudnn_from=$from
mkdir -p "$logs"
echo "== gpu_check: $(nvcc --version | tail -1), $(cmake --version | head -1), $jobs jobs, deps $deps, NCCL from $nccl_from, cuDNN from $cudnn_from"

# ---- 1. configure + build --------------------------------------------------------------
t0=$(date +%s)
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA=ON -DGPT_MPI=OFF \
     -DCMAKE_CUDA_ARCHITECTURES="$arch" \
     -DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_PATH="$libdir" -DCMAKE_INCLUDE_PATH="$deps/usr/include" \
     -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
     -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" -DCLI11_DIR="$deps/usr/share/cmake/CLI11" \
     -Dspdlog_DIR="$libdir/cmake/spdlog" -Dfmt_DIR="$libdir/cmake/fmt" -DGTest_DIR="$libdir/cmake/GTest" \
     ${lib_args[@]+"${lib_args[@]}"} \
     >"$logs/configure.log" 2>&1 &&
   cmake --build "$build" -j"$jobs" --target gpt gpt_tests >"$logs/build.log" 2>&1; then
  row "build (CUDA sm_$arch)" ok "$(elapsed "$t0"), log $logs/build.log"
else
  failed "build (CUDA sm_$arch)" "see $logs/configure.log, $logs/build.log"
  tail -30 "$logs/build.log" "$logs/configure.log" 2>/dev/null
  printf '%s\n' "${rows[@]}"
  exit 1
fi
gpt=$build/gpt
have_nccl=0
grep -q 'gpt: NCCL .* found' "$logs/configure.log" && have_nccl=1
if [ $have_nccl = 1 ]; then row "NCCL" ok "$(grep -oP 'gpt: NCCL \K[0-9.]+' "$logs/configure.log") from $nccl_from"
else
  row "NCCL" skip "not found (CUDA toolkit, nvidia-nccl-cu13): the NCCL tests and run are left out"
  # Without NCCL those tests would only skip, which counts as a failure here.
  [ -n "${GPU_TEST_FILTER:-}" ] || filter="${filter//Nccl.\*:/}:CudaCli.OneRankThroughNccl*"
fi
have_cudnn=0
grep -q "gpt: cuDNN .* found" "$logs/configure.log" && have_cudnn=1
if [ $have_cudnn = 1 ]; then
  row "cuDNN" ok "$(grep -oP 'gpt: cuDNN \K[0-9.]+' "$logs/configure.log") from $cudnn_from, cudnn-frontend $(grep -oP 'cudnn-frontend \K[0-9.]+' "$logs/configure.log")"
else
  row "cuDNN" skip "$(grep -oP 'left out of gpt bench \(\K.*(?=\))' "$logs/configure.log" | head -1)"
  # Its tests would only skip, which counts as a failure here.
  if [ -z "${GPU_TEST_FILTER:-}" ]; then
    case "$filter" in *-*) filter="$filter:CudaCudnnSdpa.*" ;; *) filter="$filter-CudaCudnnSdpa.*" ;; esac
  fi
fi
"$gpt" info | tee "$logs/info.log"
device=$(grep -m1 '^cuda:0' "$logs/info.log" | sed 's/^cuda:0 //; s/,.*//')
[ -n "$device" ] || failed "cuda device" "gpt info sees none: $(grep -A1 '^cuda:' "$logs/info.log" | tail -1)"

# ---- 2. tensor-core layouts, then the parity tests ------------------------------------
# First the tests' table of the mma/ldmatrix fragment layouts against this
# GPU (docs/gpu.md, "The tensor-core layer"): every tensor-core kernel's
# parity rests on it.
t0=$(date +%s)
"$build/gpt_tests" --gtest_filter='*MmaLayout.*' >"$logs/mma_layout.log" 2>&1
rc=$?
mma_passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$logs/mma_layout.log" || echo 0)
if [ $rc -eq 0 ] && ! grep -qP '^\[  SKIPPED \] [0-9]' "$logs/mma_layout.log"; then
  row "tensor-core layouts" ok "$mma_passed tests ($(elapsed "$t0"))"
else
  failed "tensor-core layouts" "the PTX fragment table and this GPU disagree (or the tests skipped): $logs/mma_layout.log"
  grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z]' "$logs/mma_layout.log" | grep -v ' ms)$' | sed 's/^/    /' | head -10
fi
t0=$(date +%s)
"$build/gpt_tests" --gtest_filter="$filter" >"$logs/tests.log" 2>&1
rc=$?
passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$logs/tests.log" || echo 0)
skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$logs/tests.log" || echo 0)
nfailed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$logs/tests.log" || echo 0)
summary="$passed passed, $skipped skipped, $nfailed failed ($(elapsed "$t0"); filter $filter)"
if [ $rc -eq 0 ] && [ "$skipped" = 0 ]; then row "CUDA parity tests" ok "$summary"
else
  failed "CUDA parity tests" "$summary; log $logs/tests.log"
  grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z]' "$logs/tests.log" | grep -v ' ms)$' | sed 's/^/    /' | head -20
fi

# ---- 3. short training run on cuda (and a few cpu steps to compare) ----------------------
t0=$(date +%s)
data=$build/check/data
rm -rf "$data" "$build/check/runs"
mkdir -p "$data"
find README.md docs src kernels tests scripts -type f \( -name '*.md' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
  -o -name '*.sh' \) -print0 2>/dev/null | sort -z | xargs -0 cat >"$data/corpus.txt"
train_common=(--set "data.train=$data/text_train_*.bin" --set "data.val=$data/text_val_*.bin"
  --set eval.tokens=16384 --set "eval.multiples=[1,2,4]" --set train.log_every=50)
loss_at() {  # loss_at RUN_DIR STEP
  grep "\"event\":\"train\"" "$1/metrics.jsonl" | grep "\"step\":$2," | tail -1 | sed 's/.*"loss":\([^,}]*\).*/\1/'
}
# compare_bf16_run LABEL NAME ARGS...: trains the fp32 cuda run's config again
# with ARGS into runs/NAME and prints its final loss next to the fp32 one
# ($last); a relative difference of 5% or more (or a NaN) is a failure.
compare_bf16_run() {
  local label=$1 name=$2 t1 bfirst blast btoks bcmp
  shift 2
  t1=$(date +%s)
  if "$gpt" train configs/quickstart.json "${train_common[@]}" --set run.device=cuda "$@" \
       --set train.steps="$train_steps" --set train.warmup_steps=$((train_steps / 10)) \
       --set "run.dir=$build/check/runs/$name" >"$logs/train_$name.log" 2>&1; then
    bfirst=$(loss_at "$build/check/runs/$name" 1)
    blast=$(loss_at "$build/check/runs/$name" "$train_steps")
    btoks=$(grep -oP '\| \K[0-9]+(?= tok/s)' "$logs/train_$name.log" | tail -1)
    # Same data and seed: bf16 should end within a few percent of fp32.
    bcmp=$(awk -v a="$blast" -v b="$last" 'BEGIN { d = a - b; if (d < 0) d = -d;
                                             if (b + 0 <= 0 || a != a + 0) { print "FAIL nan"; exit }
                                             r = d / b; printf "%s %.2e", (r < 0.05 ? "ok" : "FAIL"), r }')
    [ "${bcmp%% *}" = ok ] || status=1
    row "$label" "${bcmp%% *}" \
      "$train_steps steps: loss $bfirst -> $blast (fp32: $last; relative difference ${bcmp#* }), $btoks tok/s ($(elapsed "$t1"))"
  else
    failed "$label" "log $logs/train_$name.log"
    tail -n 5 "$logs/train_$name.log" | sed 's/^/    /'
  fi
}
if "$gpt" data text "$data/corpus.txt" "$data" --tokenizer byte --val-fraction 0.1 --name text >"$logs/data.log" 2>&1 &&
   "$gpt" train configs/quickstart.json "${train_common[@]}" --set run.device=cuda --set train.steps="$train_steps" \
     --set train.warmup_steps=$((train_steps / 10)) \
     --set "run.dir=$build/check/runs/cuda" >"$logs/train_cuda.log" 2>&1; then
  first=$(loss_at "$build/check/runs/cuda" 1)
  last=$(loss_at "$build/check/runs/cuda" "$train_steps")
  toks=$(grep -oP '\| \K[0-9]+(?= tok/s)' "$logs/train_cuda.log" | tail -1)
  row "train quickstart on cuda" ok "$train_steps steps: loss $first -> $last, $toks tok/s ($(elapsed "$t0"))"
  # The same run with bf16 GEMM operands, then with bf16 storage as well:
  # each final loss next to the fp32 one.
  compare_bf16_run "train quickstart cuda bf16" cuda_bf16 --set run.precision=bf16
  compare_bf16_run "train cuda bf16 storage" cuda_bf16_storage --set run.precision=bf16 \
    --set run.storage=bf16
  if "$gpt" train configs/quickstart.json "${train_common[@]}" --set run.device=cpu --set train.steps=20 --set train.warmup_steps=2 \
       --set train.log_every=10 --set "run.dir=$build/check/runs/cpu" >"$logs/train_cpu.log" 2>&1; then
    # Same seed and data order: the first step is the same computation on both.
    c1=$(loss_at "$build/check/runs/cpu" 1)
    cmp=$(awk -v a="$first" -v b="$c1" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / b;
                                              printf "%s %.2e", (r < 1e-4 ? "ok" : "FAIL"), r }')
    [ "${cmp%% *}" = ok ] || status=1
    row "step-1 loss cuda vs cpu" "${cmp%% *}" "cuda $first, cpu $c1, relative difference ${cmp#* }"
  else
    failed "train quickstart on cpu" "log $logs/train_cpu.log"
  fi
else
  failed "train quickstart on cuda" "log $logs/train_cuda.log"
  tail -n 5 "$logs/data.log" "$logs/train_cuda.log" | sed 's/^/    /'
fi

# ---- 3a. context-extension methods on the device --------------------------------------------
# The fp32 cuda run evaluated at 1x-4x with YaRN, sinks and Llama 4's
# temperature, and with ReRoPE + YaRN, on cuda and on cpu: the fused kernels'
# masks (skipped key tiles), temperatures and distance remapping (the far copy)
# against the CPU kernels on a trained model.
if [ -f "$build/check/runs/cuda/extrapolation.json" ]; then
  for pair in yarn,sinks,llama4_temp:window=120 rerope,yarn:remap_window=64; do
    methods=${pair%%:*}
    for dev in cuda cpu; do
      timeout 300 "$gpt" eval "$build/check/runs/cuda" --device "$dev" --context "$methods" --context-set "${pair#*:}" \
        --tokens 16384 --out "$build/check/ctx_$dev.json" >"$logs/ctx_${methods}_$dev.log" 2>&1 ||
        failed "eval $methods $dev" "log $logs/ctx_${methods}_$dev.log"
    done
    if [ -f "$build/check/ctx_cuda.json" ] && [ -f "$build/check/ctx_cpu.json" ]; then
      cmp=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["multiples"]; b=json.load(open(sys.argv[2]))["multiples"]
d=max(abs(x["loss"]-y["loss"])/y["loss"] for x,y in zip(a,b)); print(("ok" if d<1e-4 else "FAIL"), "%.2e"%d, " ".join("%.4f"%x["loss"] for x in a))' \
        "$build/check/ctx_cuda.json" "$build/check/ctx_cpu.json" 2>&1)
      [ "${cmp%% *}" = ok ] || status=1
      row "eval $methods cuda/cpu" "${cmp%% *}" "max relative difference ${cmp#* }"
    fi
    rm -f "$build/check/ctx_cuda.json" "$build/check/ctx_cpu.json"
  done
fi

# ---- 3b. one GPU through the NCCL communicator ------------------------------------------
# GPT_DIST_NCCL=1 sends a one-rank cuda run through NCCL: the parameter
# broadcast and every layer's all-reduce started during the backward pass on
# NCCL's stream. With one rank each sum is the rank's own value, so every
# loss must match the plain run's; not bit for bit, since the kernels'
# atomicAdd makes two GPU runs differ in the last bits: within 1e-5
# relative. (An in-place one-rank all-reduce writes nothing, so this checks
# that the NCCL path runs, waits for its stream and leaves training as it
# was, not NCCL's arithmetic.)
if [ $have_nccl = 1 ] && [ -f "$data/corpus.txt" ] && ls "$data"/text_train_*.bin >/dev/null 2>&1; then
  t0=$(date +%s)
  short=(--set run.device=cuda --set train.steps=50 --set train.warmup_steps=5 --set train.log_every=10)
  losses() { grep '"event":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
  if "$gpt" train configs/quickstart.json "${train_common[@]}" "${short[@]}" \
       --set "run.dir=$build/check/runs/cuda_plain50" >"$logs/train_plain50.log" 2>&1 &&
     GPT_DIST_NCCL=1 "$gpt" train configs/quickstart.json "${train_common[@]}" "${short[@]}" \
       --set "run.dir=$build/check/runs/cuda_nccl50" >"$logs/train_nccl50.log" 2>&1; then
    n=$(losses "$build/check/runs/cuda_nccl50" | wc -l)
    via=$(grep -oP 'data parallel: \K.*' "$logs/train_nccl50.log" | head -1)
    worst=$(paste <(losses "$build/check/runs/cuda_plain50") <(losses "$build/check/runs/cuda_nccl50") |
      awk 'NF != 2 || $1 != $1 + 0 || $2 != $2 + 0 { bad = 1 }
           { d = $1 - $2; if (d < 0) d = -d; r = $1 > 0 ? d / $1 : d; if (r > w) w = r }
           END { if (bad || NR == 0) print "bad"; else printf "%.2e", w }')
    if [ "$n" -gt 0 ] && [ -n "$via" ] && [ "$worst" != bad ] &&
       awk -v w="$worst" 'BEGIN { exit !(w + 0 <= 1e-5) }'; then
      row "train 1 GPU through NCCL" ok "$n losses within $worst of the plain run's ($via; $(elapsed "$t0"))"
    else
      failed "train 1 GPU through NCCL" "losses differ from the plain run's ($worst) or no NCCL line; logs $logs/train_nccl50.log"
    fi
  else
    failed "train 1 GPU through NCCL" "logs $logs/train_plain50.log, $logs/train_nccl50.log"
    tail -n 5 "$logs/train_nccl50.log" 2>/dev/null | sed 's/^/    /'
  fi
fi

# ---- 4. benchmark: GPT-2 small, T = 1024 -------------------------------------------------
bench_row() {  # bench_row LABEL LOG
  local line
  line=$(grep -E '^train ' "$2" | head -1)
  if [ -n "$line" ]; then
    # Table columns of src/bench/bench.cpp: tokens/s 59-68, GFLOP/s 70-78, "of peak" 80-87, note 90-.
    row "$1" ok "$(echo "$line" | cut -c59-68 | tr -d ' ') tok/s, $(echo "$line" | cut -c70-78 | tr -d ' ') GFLOP/s, MFU $(echo "$line" | cut -c80-87 | tr -d ' ') $(echo "$line" | cut -c90-)"
  else failed "$1" "log $2"; fi
}
t0=$(date +%s)
timeout 300 "$gpt" bench configs/gpt2_small_cuda.json --device cuda --precision fp32 --only gemm,train,eval \
  --steps "$bench_steps" --min-seconds 0.2 >"$logs/bench_fp32.log" 2>&1
bench_row "bench GPT-2 small fp32" "$logs/bench_fp32.log"
timeout 300 "$gpt" bench configs/gpt2_small_cuda.json --device cuda --precision tf32 --only train \
  --steps "$bench_steps" --min-seconds 0.2 >"$logs/bench_tf32.log" 2>&1
bench_row "bench GPT-2 small tf32" "$logs/bench_tf32.log"
# bf16 GEMM operands: the MFU column is against the bf16 dense peak.
timeout 300 "$gpt" bench configs/gpt2_small_cuda.json --device cuda --precision bf16 --only gemm,train \
  --steps "$bench_steps" --min-seconds 0.2 >"$logs/bench_bf16.log" 2>&1
bench_row "bench GPT-2 small bf16" "$logs/bench_bf16.log"
# bf16 storage (run.storage=bf16) with bf16 GEMMs: training throughput.
timeout 300 "$gpt" bench configs/gpt2_small_cuda.json --device cuda --precision bf16 --set run.storage=bf16 \
  --only train --steps "$bench_steps" --min-seconds 0.2 >"$logs/bench_bf16_storage.log" 2>&1
bench_row "bench GPT-2 bf16 storage" "$logs/bench_bf16_storage.log"
# Evaluation memory of GPT-2 small with RoPE at 1x, 4x and 16x T = 1024 (16K
# tokens): the same KiB per token at every multiple means no T x T buffer.
timeout 200 "$gpt" bench configs/gpt2_fineweb/softmax.json --device cuda --precision fp32 --only memory \
  >"$logs/bench_memory.log" 2>&1
mem16=$(grep -E '^memory +eval 16x' "$logs/bench_memory.log" | grep -oP 'device memory \K.*')
if [ -n "$mem16" ]; then
  row "eval 16K tokens memory" ok "$mem16; 1x: $(grep -E '^memory +eval 1x' "$logs/bench_memory.log" | grep -oP '\(\K[0-9.]+ KiB/token')"
else failed "eval 16K tokens memory" "log $logs/bench_memory.log"; fi
cat "$logs/bench_fp32.log" "$logs/bench_bf16.log" "$logs/bench_bf16_storage.log" "$logs/bench_memory.log"

# ---- 5. attention kernels against cuDNN's fused attention, T = 1K-16K ----------------------
# Rows "cudnn-bf16 T B fwd-ms TFLOP/s fwd+bwd-ms TFLOP/s fwd-ratio f+b-ratio" of
# src/bench/cuda_attention_bench.cpp, or "cudnn-bf16 T B cuDNN: error". A report,
# not a pass/fail on speed (the goal: forward ratio at most 2).
t0=$(date +%s)
timeout 300 "$gpt" bench --device cuda --only cuda-attention --presets softmax,lssar \
  >"$logs/bench_attention.log" 2>&1
rc=$?
ratios=$(awk '$1 == "cudnn-bf16" && $4 != "cuDNN:" { printf "%s%dK %s/%s", sep, $2 / 1024, $8, $9; sep = ", " }' \
  "$logs/bench_attention.log")
cerr=$(awk '$1 == "cudnn-bf16" && $4 == "cuDNN:" { t = $2; $1 = $2 = $3 = $4 = ""; sub(/^ +/, ""); print "T=" t ": " $0; exit }' \
  "$logs/bench_attention.log")
if [ $rc -ne 0 ] || ! grep -qE '^softmax +[0-9]' "$logs/bench_attention.log"; then
  failed "bench attention vs cuDNN" "rc $rc; log $logs/bench_attention.log"
  tail -n 5 "$logs/bench_attention.log" | sed 's/^/    /'
elif [ $have_cudnn = 0 ]; then
  row "bench attention vs cuDNN" skip "cuDNN not in this build; kernels timed, log $logs/bench_attention.log"
elif [ -n "$cerr" ] || [ -z "$ratios" ]; then
  failed "bench attention vs cuDNN" "${cerr:-no cuDNN rows}; log $logs/bench_attention.log"
else
  row "bench attention vs cuDNN" ok "softmax/cuDNN time fwd/f+b: $ratios ($(elapsed "$t0"))"
fi
sed -n '/^attention on/,$p' "$logs/bench_attention.log"

# ---- 6. the contenders' normalisations beside softmax ---------------------------------------
# Rows "preset T B fwd-ms TFLOP/s f+b-ms TFLOP/s f+b/softmax" of cuda_attention_bench.cpp.
t0=$(date +%s)
# FIRE's table (and its dL/db) is H*T*T floats: 12.9 GB each at 16K.
timeout 240 "$gpt" bench --device cuda --only cuda-attention \
  --presets softmax,softmax1,sink,softpick,stick_breaking,softmax+kerple_log,softmax+forget,softmax+fire,softmax+differential,softmax+softcap \
  --contexts 4096,16384 >"$logs/bench_contenders.log" 2>&1
rc=$?
contenders='^(softmax1|sink|softpick|stick_breaking|softmax[+](kerple_log|forget|fire|differential|softcap))$'
cratios=$(awk -v re="$contenders" '$1 ~ re && $2 ~ /^[0-9]+$/ {
  printf "%s%s %dK %s", sep, $1, $2 / 1024, $8; sep = ", " }' "$logs/bench_contenders.log")
if [ $rc -ne 0 ] || [ "$(awk -v re="$contenders" '$1 ~ re && $2 ~ /^[0-9]+$/' "$logs/bench_contenders.log" | wc -l)" -ne 16 ]; then
  failed "bench contenders' attention" "rc $rc; log $logs/bench_contenders.log"
  tail -n 5 "$logs/bench_contenders.log" | sed 's/^/    /'
else
  row "bench contenders' attention" ok "f+b time / softmax: $cratios ($(elapsed "$t0"))"
fi

# ---- 7. compute-sanitizer over a few kernel tests -------------------------------------------
# What the emulator cannot see (docs/gpu.md): memcheck (out-of-bounds and
# misaligned global and shared accesses on the hardware's own address
# checks), racecheck (shared-memory hazards between the threads of a
# block, at the interleavings the GPU really runs) and synccheck (barriers
# and warp-synchronous calls used where the hardware does not allow them,
# the emulator's deadlock check's counterpart). SANITIZER_TOOLS picks them
# (default "memcheck racecheck synccheck"). A fast subset only:
# under the sanitizer a kernel runs 10-100 times slower. Each tool has
# SANITIZER_SECONDS (default 150); a run cut short is a skip, not a pass.
# SANITIZER=0 leaves the step out.
sanitizer=$(dirname "$(command -v nvcc)")/compute-sanitizer
if [ "${SANITIZER:-1}" = 0 ]; then
  row "compute-sanitizer" skip "SANITIZER=0"
elif [ ! -x "$sanitizer" ]; then
  row "compute-sanitizer" skip "not found beside nvcc ($sanitizer)"
else
  san_filter='CudaMmaLayout.*:CudaOps.*:CudaBf16Native.*:CudaAttention.EveryPresetHeadSize64:CudaAttention.TensorCoreForwardEveryPresetAndHeadSize:CudaAttention.TensorCoreBackwardEveryPreset:CudaAttention.TensorCoreStickBreakingForward'
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
    t0=$(date +%s)
    timeout "${SANITIZER_SECONDS:-150}" "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
      "$build/gpt_tests" --gtest_filter="$san_filter" >"$logs/sanitizer_$tool.log" 2>&1
    rc=$?
    summary=$(grep -oP 'ERROR SUMMARY: \K.*' "$logs/sanitizer_$tool.log" | tail -1)
    if [ $rc -eq 124 ]; then
      row "compute-sanitizer $tool" skip "timed out after ${SANITIZER_SECONDS:-150}s (SANITIZER_SECONDS); log $logs/sanitizer_$tool.log"
    elif [ $rc -eq 0 ]; then
      row "compute-sanitizer $tool" ok "${summary:-no summary} ($(elapsed "$t0"); $san_filter)"
    else
      failed "compute-sanitizer $tool" "rc $rc, ${summary:-no summary}; log $logs/sanitizer_$tool.log"
      grep -m5 -E '^========= (Invalid|Race|Error|.*hazard)' "$logs/sanitizer_$tool.log" | sed 's/^/    /'
    fi
  done
fi

# ---- table -------------------------------------------------------------------------------
echo
echo "== gpu_check on ${device:-no device} ($(elapsed "$start") total; logs in $logs)"
printf '%-28s %-8s %s\n' check result details
printf '%s\n' "${rows[@]}"
exit $status
