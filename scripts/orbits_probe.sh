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

# One line per run (the fitted exponents with 95% intervals, the rmse of
# ln F against the truth), then per variant the mean and sd over its seeds;
# the symbolic formulas where scripts/symbolic_regression.sh wrote them.
python3 - "$dir" <<'PY'
import glob, json, os, statistics as st, sys
rows = {}
print(f'{"run":<24} {"points":>6} {"a (planet mass)":>22} {"b (star mass)":>22} {"c (distance)":>22} {"rmse lnF":>8} {"oracle c":>8}')
for r in sorted(glob.glob(os.path.join(sys.argv[1], "*", "seed*", "probe", "results.json"))):
    j = json.load(open(r)); m = j["model"]
    parts = r.split(os.sep); name = parts[-4] + "/" + parts[-3]
    f = lambda k: f'{m[k]["value"]:+.2f} [{m[k]["lo95"]:+.2f},{m[k]["hi95"]:+.2f}]' if k in m else "-"
    print(f'{name:<24} {j["points"]:6d} {f("a"):>22} {f("b"):>22} {f("c"):>22} {m.get("rmse_log_vs_truth", float("nan")):8.3f} '
          f'{j["oracle"]["c"]["value"]:+8.2f}')
    if "a" in m: rows.setdefault(parts[-4], []).append((m["a"]["value"], m["b"]["value"], m["c"]["value"], m["rmse_log_vs_truth"]))
    for sym in sorted(glob.glob(os.path.join(os.path.dirname(r), "symbolic_*.json"))):
        s = json.load(open(sym)); print(f'    {s["column"]}: F = {s["formula"]} ({s["tool"]}, {s["size"]} nodes)')
print(f'\n{"variant":<16} {"seeds":>5} {"a mean (sd)":>16} {"b mean (sd)":>16} {"c mean (sd)":>16} {"rmse lnF":>12}')
for v, xs in rows.items():
    def ms(i):
        vals = [x[i] for x in xs]; sd = st.stdev(vals) if len(vals) > 1 else float("nan")
        return f'{st.mean(vals):+.2f} ({sd:.2f})'
    print(f'{v:<16} {len(xs):5d} {ms(0):>16} {ms(1):>16} {ms(2):>16} {ms(3):>12}')
PY
