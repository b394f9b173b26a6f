#!/usr/bin/env bash
# The main job: set up and build, prepare the King James Bible as byte-level
# token shards, train configs/quickstart.json and print validation loss at
# 1x, 2x, 4x, 8x and 16x the training context.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh gpt
scripts/prepare_kjv.sh data/kjv
RUN_DIR=runs/quickstart
# A fresh run each time; `gpt train --resume runs/quickstart` continues one.
rm -rf "$RUN_DIR"
build/gpt train configs/quickstart.json --set run.dir="$RUN_DIR" "$@"
echo "quickstart: run directory $RUN_DIR (config.json, metrics.jsonl, extrapolation.json, checkpoints/)"
