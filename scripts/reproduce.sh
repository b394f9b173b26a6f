#!/usr/bin/env bash
# The reproduction sweep of docs/results.md: sets up and builds, prepares the
# King James Bible as byte-level shards, then trains and evaluates every
# variant of the sweep file (default configs/sweep/extrapolation.json) and
# writes runs/sweep/summary/ (results.md, summary.json, PNG plots).
# Finished jobs are skipped, so running it again resumes an interrupted sweep.
#   scripts/reproduce.sh [SWEEP.json] [--dry-run | --summary-only]
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=configs/sweep/extrapolation.json
if (($#)) && [[ "$1" != --* ]]; then
  SWEEP=$1
  shift
fi
scripts/setup.sh gpt
scripts/prepare_kjv.sh data/kjv
# One OpenMP thread per job spins less on a busy machine (base.json sets
# train.threads = 1 for the same reason).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
start=$(date +%s)
status=0
build/gpt sweep "$SWEEP" "$@" || status=$?
echo "reproduce: $SWEEP finished with status $status after $(( ($(date +%s) - start) / 60 )) min"
exit $status
