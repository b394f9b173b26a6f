#!/usr/bin/env bash
# Shows that two builds of gpt compute the same thing: for every attention
# preset and contender config (configs/attention/*.json,
# configs/contenders/*.json, or the configs given), a short training run with
# each binary (losses of every step, the 1x/4x evaluation, the attention
# diagnostics), then `gpt eval` of the OLD binary's checkpoint by both, with
# and without context-extension methods. Timings aside, the outputs must be
# identical; the script prints one line per config and exits 1 on any
# difference. Used to show that a refactoring changes no number.
#   scripts/compare_binaries.sh OLD_GPT NEW_GPT [CONFIG...]
#   STEPS=20 THREADS=1 OUT=/tmp/gpt_compare   (defaults)
#   IGNORE=REGEX drops the results keys it matches as well (for a change that
#   adds a field to the results, e.g. IGNORE='^block$'); say so when you do.
# Needs the KJV shards (scripts/prepare_kjv.sh). Both binaries must read the
# configs: a binary older than config "extends" (8c4d640) needs the configs of
# its own checkout (git archive OLD configs | tar -x -C DIR; pass DIR/configs/...).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "${1:?usage: compare_binaries.sh OLD_GPT NEW_GPT [CONFIG...]}")
new=$(realpath "${2:?usage: compare_binaries.sh OLD_GPT NEW_GPT [CONFIG...]}")
shift 2
configs=("$@")
if ((${#configs[@]} == 0)); then configs=(configs/attention/*.json configs/contenders/*.json); fi
steps=${STEPS:-20} threads=${THREADS:-1} out=${OUT:-/tmp/gpt_compare}
rm -rf "$out"
mkdir -p "$out"

# The numbers of a results or metrics file, without wall-clock fields.
numbers() {
  jq -S --arg ignore "${IGNORE:-^$}" 'walk(if type == "object" then with_entries(select((.key | test("time|seconds|per_s|elapsed|date|dir|path|checkpoint|wall"; "i") | not) and (.key | test($ignore) | not))) else . end)' "$@"
}

failed=0
for cfg in "${configs[@]}"; do
  name=$(basename "$(dirname "$cfg")")_$(basename "$cfg" .json)
  mkdir -p "$out/$name"
  for which in old new; do
    bin=$old
    [ "$which" = new ] && bin=$new
    dir="$out/$name/$which"
    "$bin" train "$cfg" --set train.steps="$steps" --set train.warmup_steps=2 --set train.log_every=1 \
      --set train.threads="$threads" --set eval.tokens=8192 --set eval.span=2048 --set 'eval.multiples=[1,4]' \
      --set run.dir="$dir" >"$out/$name/$which.train.log" 2>&1 ||
      { echo "$name: $which binary failed to train (see $out/$name/$which.train.log)"; failed=1; continue 2; }
  done
  for which in old new; do
    bin=$old
    [ "$which" = new ] && bin=$new
    "$bin" eval "$out/$name/old" --multiples 1,2,8 --tokens 4096 --out "$out/$name/eval_$which.json" \
      >/dev/null 2>&1 || { echo "$name: $which binary failed to evaluate"; failed=1; continue 2; }
    # With context-extension methods where the model has RoPE (refused otherwise: then neither may run).
    if "$bin" eval "$out/$name/old" --multiples 2,4 --tokens 4096 --context yarn,window \
      --out "$out/$name/ctx_$which.json" >"$out/$name/ctx_$which.log" 2>&1; then :; else rm -f "$out/$name/ctx_$which.json"; fi
  done
  diffs=()
  cmp -s <(jq -c '{step, loss, grad_norm, lr} | select(.loss != null)' "$out/$name/old/metrics.jsonl") \
    <(jq -c '{step, loss, grad_norm, lr} | select(.loss != null)' "$out/$name/new/metrics.jsonl") || diffs+=(training-losses)
  cmp -s <(numbers "$out/$name/old/extrapolation.json") <(numbers "$out/$name/new/extrapolation.json") ||
    diffs+=(training-eval)
  cmp -s <(numbers "$out/$name/eval_old.json") <(numbers "$out/$name/eval_new.json") || diffs+=(eval)
  if [ -f "$out/$name/ctx_old.json" ] || [ -f "$out/$name/ctx_new.json" ]; then
    if [ -f "$out/$name/ctx_old.json" ] && [ -f "$out/$name/ctx_new.json" ]; then
      cmp -s <(numbers "$out/$name/ctx_old.json") <(numbers "$out/$name/ctx_new.json") || diffs+=(eval-yarn-window)
    else
      diffs+=(eval-yarn-window-refused-by-one)
    fi
  fi
  steps_seen=$(jq -s '[.[] | select(.loss != null)] | length' "$out/$name/new/metrics.jsonl")
  loss_1x=$(jq -r '[.. | objects | select(has("multiple") and has("loss"))][0].loss' "$out/$name/eval_new.json" 2>/dev/null || echo "?")
  if ((${#diffs[@]})); then
    echo "$name: DIFFERENT (${diffs[*]})"
    failed=1
  else
    echo "$name: identical ($steps_seen training steps, eval 1x loss $loss_1x$([ -f "$out/$name/ctx_new.json" ] && echo ', yarn+window too'))"
  fi
done
exit $failed
