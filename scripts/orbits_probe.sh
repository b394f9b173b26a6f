#!/usr/bin/env bash
# The physics probe's comparison (docs/orbits.md, docs/results.md): makes
# the orbit data (pretraining: 1-10 planets; probe: two-body systems), runs
# the pretraining sweep (configs/sweep/orbits.json), then gpt probe force on
# every finished run, then prints one line per run with the fitted
# exponents. Resumable: finished sweep jobs and probes (results.json) are
# skipped; interrupt with Ctrl-C and run again.
#   scripts/orbits_probe.sh [--jobs 2] [--probe-steps 300] [SWEEP.json]
#   GPT_BIN=build/gpt   the binary
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=2
probe_steps=300
sweep=configs/sweep/orbits.json
while (($#)); do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --probe-steps) probe_steps=$2; shift 2 ;;
    -*) echo "orbits_probe: unknown option $1" >&2; exit 2 ;;
    *) sweep=$1; shift ;;
  esac
done
gpt=${GPT_BIN:-build/gpt}
[ -x "$gpt" ] || { echo "orbits_probe: $gpt is not built (scripts/setup.sh, or set GPT_BIN)" >&2; exit 1; }

[ -f data/orbits/orbits.json ] ||
  "$gpt" data orbits data/orbits --train-sequences 5000 --val-sequences 200 --seed 1
[ -f data/orbits2/orbits.json ] ||
  "$gpt" data orbits data/orbits2 --train-sequences 2000 --val-sequences 300 --max-planets 1 --seed 2

"$gpt" sweep "$sweep" --jobs "$jobs"

# The probes, up to $jobs at once, one thread each.
dir=$(python3 -c 'import json,re,sys; t=open(sys.argv[1]).read(); t=re.sub(r"//[^\n]*","",t); print(json.loads(t)["dir"])' "$sweep")
probe_one() {
  local run=$1 out=$1/probe
  [ -f "$out/results.json" ] && return 0
  local from=$run
  [ -f "$out/checkpoints/latest" ] && from=$out  # an interrupted probe goes on
  "$gpt" probe force --from "$from" --data data/orbits2 --out "$out" --steps "$probe_steps" --threads 1 \
    --log-every 100 >"$run/probe.log" 2>&1 || { echo "orbits_probe: $out failed (see $run/probe.log)" >&2; return 1; }
}
running=0
for run in "$dir"/*/seed*; do
  [ -f "$run/checkpoints/latest" ] || continue
  probe_one "$run" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true

printf '%-28s %6s %24s %24s %24s %9s\n' run points a b c rmse_lnF
for r in "$dir"/*/seed*/probe/results.json; do
  [ -f "$r" ] || continue
  python3 - "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); m = j["model"]
name = sys.argv[1].split("/")[-4] + "/" + sys.argv[1].split("/")[-3]
f = lambda k: f'{m[k]["value"]:+.2f} [{m[k]["lo95"]:+.2f},{m[k]["hi95"]:+.2f}]' if k in m else "-"
print(f'{name:<28} {j["points"]:6d} {f("a"):>24} {f("b"):>24} {f("c"):>24} {m.get("rmse_log_vs_truth", float("nan")):9.3f}')
PY
done
