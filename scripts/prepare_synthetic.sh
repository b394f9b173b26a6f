#!/usr/bin/env bash
# Generates the synthetic tasks that configs/synthetic/*.json train on
# (issue 17): data/synthetic/TASK/{TASK_train_000001.bin, TASK_val_000000.bin,
# their .mask files, task.json}. Usage: scripts/prepare_synthetic.sh [TASK...]
# (default: every task). GPT_BIN names the binary (default build/gpt).
set -euo pipefail
cd "$(dirname "$0")/.."
GPT_BIN=${GPT_BIN:-build/gpt}
[ -x "$GPT_BIN" ] || { echo "prepare_synthetic: $GPT_BIN is not built (cmake --build build, or set GPT_BIN)" >&2; exit 1; }
# TASK: context, training examples, options (validation: 2000 examples).
declare -A ARGS=(
  [mqar]="--context 64 --train-examples 200000"
  [copy]="--context 64 --train-examples 200000"
  [induction]="--context 64 --train-examples 40000"
  [passkey]="--context 64 --train-examples 200000"
  [niah_multikey]="--context 128 --train-examples 200000"
  [variable_tracking]="--context 128 --train-examples 200000"
)
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(mqar copy induction passkey niah_multikey variable_tracking)
for t in "${tasks[@]}"; do
  [ -n "${ARGS[$t]+x}" ] || { echo "prepare_synthetic: unknown task '$t' (${!ARGS[*]})" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$GPT_BIN" data synthetic "$t" "data/synthetic/$t" ${ARGS[$t]} --val-examples 2000 --seed 1
done
echo "prepare_synthetic: done: ${tasks[*]}"
