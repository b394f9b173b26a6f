#!/usr/bin/env bash
# Symbolic regression of a force probe's predictions (docs/orbits.md,
# "Symbolic regression"): sets up .venv-sr/ from PyPI on first use, then
# fits a formula in r, m1, m2 to a column of predictions.csv (gpt probe
# force), as the source does with PySR; gplearn with the same operators when
# PySR cannot run here (it needs Julia, which it downloads). Optional: the
# build and the tests never need it.
#   scripts/symbolic_regression.sh PROBE_DIR [--column model|oracle|force] [--samples 1000] [--seed 0]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-sr
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet numpy scikit-learn gplearn
fi
exec "$venv/bin/python" scripts/symbolic_regression.py "$@"
