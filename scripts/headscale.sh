#!/usr/bin/env bash
# HeadScale (Wang et al. 2024) against one global temperature on NoPE, and
# on softmax with RoPE, where the authors found a uniform scale does not
# help (docs/results.md, "HeadScale"): trains configs/sweep/headscale.json,
# then per run fits at 16x on the first quarter of the validation stream and
# scores the rest: the uniform temperature (--calibrate temperature),
# HeadScale from tau = 1 with the authors' floor tau >= 1, HeadScale
# from the uniform value without a floor, and on NoPE SWAN-GPT's
# log_a(m + a) with a = N and with a fitted (--calibrate swan_base). Resumable: finished runs and
# evaluations (their JSON files) are skipped.
#   scripts/headscale.sh [--jobs 2] [--steps 200]
#   GPT_BIN=build/gpt   the binary
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=2
steps=200
while (($#)); do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "headscale: unknown option $1 (valid: --jobs N, --steps N)" >&2; exit 2 ;;
  esac
done
gpt=${GPT_BIN:-build/gpt}
[ -x "$gpt" ] || { echo "headscale: $gpt is not built (scripts/setup.sh, or set GPT_BIN)" >&2; exit 1; }
scripts/prepare_kjv.sh data/kjv
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
"$gpt" sweep configs/sweep/headscale.json --jobs "$jobs"

fit() {  # RUN OUT ARGS...: one evaluation, skipped when OUT exists
  local run=$1 out=$2
  shift 2
  [ -f "$out" ] && return 0
  "$gpt" eval "$run" --threads 1 --calibrate-on 16 --out "$out.part" "$@" >"$out.log" 2>&1 ||
    { echo "headscale: $out failed (see $out.log)" >&2; return 1; }
  mv "$out.part" "$out"
}
seed_fits() {
  local run=$1
  mkdir -p "$run/eval"
  fit "$run" "$run/eval/uniform.json" --calibrate temperature
  fit "$run" "$run/eval/headscale.json" --context headscale --calibrate head_scale --calibrate-steps "$steps"
  local t
  t=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["calibration"]["fitted"])' "$run/eval/uniform.json")
  fit "$run" "$run/eval/headscale_free.json" --context headscale --calibrate head_scale \
    --calibrate-steps "$steps" --head-scale-init "$t" --head-scale-floor 0
  # SWAN-GPT's log_a(m + a) acts on NoPE layers only: the NoPE runs (its
  # uncalibrated rows are a = N, its fitted ones the searched a).
  case "$run" in
    */nope/*) fit "$run" "$run/eval/swan.json" --context swan_temp --calibrate swan_base ;;
  esac
}
running=0
for run in runs/headscale/nope/seed* runs/headscale/rope/seed*; do
  [ -f "$run/checkpoints/latest" ] || continue
  seed_fits "$run" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true

# Per method and multiple: mean ± sd over seeds on the evaluation split; then
# the paired differences at 16x and the fitted temperatures.
for variant in nope rope; do
python3 - "$variant" <<'PY'
import glob, json, os, statistics as st, sys
runs = sorted(r for r in glob.glob(f"runs/headscale/{sys.argv[1]}/seed*") if os.path.exists(os.path.join(r, "eval", "uniform.json")))
if not runs:
    raise SystemExit(0)
print(f"\n{sys.argv[1]}:")
methods = [("none", "uniform.json", "uncalibrated"), ("uniform temperature", "uniform.json", "multiples"),
           ("HeadScale (tau >= 1, from 1)", "headscale.json", "multiples"),
           ("HeadScale (no floor, from uniform)", "headscale_free.json", "multiples"),
           ("SWAN log_a(m + a), a = N", "swan.json", "uncalibrated"),
           ("SWAN log_a(m + a), a fitted", "swan.json", "multiples")]
table = {}
for name, f, key in methods:
    for r in runs:
        p = os.path.join(r, "eval", f)
        if not os.path.exists(p): continue
        j = json.load(open(p))
        table.setdefault(name, []).append([row["loss"] for row in j[key]])
if not table:
    raise SystemExit("headscale: no finished evaluation yet")
mults = [row["multiple"] for row in json.load(open(os.path.join(runs[0], "eval", "uniform.json")))["multiples"]]
print(f"| method (softmax, {sys.argv[1]}) | seeds | " + " | ".join(f"{m}x" for m in mults) + " |")
print("|---|---|" + "---|" * len(mults))
for name, rows in table.items():
    cells = []
    for k in range(len(mults)):
        v = [x[k] for x in rows]
        cells.append(f"{st.mean(v):.3f} ± {st.stdev(v):.3f}" if len(v) > 1 else f"{v[0]:.3f}")
    print(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
base = table.get("none", [])
for name, rows in table.items():
    if name == "none" or len(rows) != len(base): continue
    d = [r[-1] - b[-1] for r, b in zip(rows, base)]
    print(f"{name} - none at {mults[-1]}x per seed: " + ", ".join(f"{x:+.3f}" for x in d))
for r in runs:
    for f in ("uniform.json", "headscale.json", "headscale_free.json", "swan.json"):
        p = os.path.join(r, "eval", f)
        if not os.path.exists(p): continue
        c = json.load(open(p))["calibration"]
        if c["knob"] == "temperature":
            print(f"{r} uniform temperature {c['fitted']:.3f}")
        elif c["knob"] == "swan_base":
            print(f"{r} swan a {c['fitted']:.1f} (calibration loss {c['default_loss']:.4f} at a = N -> "
                  f"{c['fitted_loss']:.4f})")
        else:
            flat = [t for layer in c["fitted"] for t in layer]
            print(f"{r} {f}: tau per layer " + " ".join("[" + " ".join(f"{t:.2f}" for t in layer) + "]"
                                                for layer in c["fitted"]) +
                  f"; calibration loss {c['initial_loss']:.4f} -> {c['fitted_loss']:.4f}")
PY
done
