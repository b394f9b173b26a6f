"""Symbolic regression of a force probe's predictions (docs/orbits.md).

Reads PROBE_DIR/predictions.csv (gpt probe force) and fits a formula
F(r, m1, m2) to one column, as Vafa et al.'s fit_symbolic_regression.py does
with PySR: operators +, *, sin, cos, exp, 1/x; at most 20 nodes; absolute
error. PySR needs Julia; where it cannot run, gplearn's genetic programming
with the same operators, loss and size limit. Writes PROBE_DIR/symbolic_COLUMN.json.
"""
import argparse
import csv
import json
import os
import sys

import numpy as np


def load(path, column):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"symbolic_regression: {path} has no rows")
    if column not in rows[0]:
        sys.exit(f"symbolic_regression: {path} has no column {column!r} (columns: {', '.join(rows[0])})")
    x = np.array([[float(r["r"]), float(r["m1"]), float(r["m2"])] for r in rows])
    y = np.array([float(r[column]) for r in rows])
    return x, y


def with_pysr(x, y, seed):
    from pysr import PySRRegressor  # noqa: needs Julia

    model = PySRRegressor(niterations=100, binary_operators=["+", "*"],
                          unary_operators=["sin", "cos", "exp", "inv(x) = 1/x"],
                          extra_sympy_mappings={"inv": lambda v: 1 / v},
                          elementwise_loss="loss(prediction, target) = abs(prediction - target)",
                          maxsize=20, parallelism="serial", deterministic=True, random_state=seed,
                          model_selection="score")
    model.fit(x, y, variable_names=["r", "m1", "m2"])
    best = model.get_best()
    return {"tool": "pysr", "formula": str(best["sympy_format"]), "loss": float(best["loss"]),
            "size": int(best["complexity"])}


def with_gplearn(x, y, seed):
    from gplearn.functions import make_function
    from gplearn.genetic import SymbolicRegressor

    def protected_exp(v):
        with np.errstate(over="ignore"):
            return np.where(v < 50, np.exp(np.minimum(v, 50)), np.exp(50))

    exp = make_function(function=protected_exp, name="exp", arity=1)
    est = SymbolicRegressor(population_size=2000, generations=40, tournament_size=20,
                            function_set=("add", "mul", "sin", "cos", "inv", exp), metric="mean absolute error",
                            init_depth=(2, 5), parsimony_coefficient=1e-6, const_range=(-10.0, 10.0),
                            p_crossover=0.7, p_subtree_mutation=0.1, p_hoist_mutation=0.05, p_point_mutation=0.1,
                            random_state=seed, n_jobs=1)
    est.fit(x, y)
    # The best program of at most 20 nodes in the last generation (PySR's maxsize).
    programs = [p for p in est._programs[-1] if p is not None and p.length_ <= 20]
    best = min(programs, key=lambda p: p.raw_fitness_) if programs else est._program
    names = {"X0": "r", "X1": "m1", "X2": "m2"}
    text = str(best)
    for k, v in names.items():
        text = text.replace(k, v)
    return {"tool": "gplearn", "formula": text, "loss": float(best.raw_fitness_), "size": int(best.length_)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe_dir")
    ap.add_argument("--column", default="model", choices=["model", "oracle", "force"])
    ap.add_argument("--samples", type=int, default=1000, help="points drawn for the fit (the source: 1,000)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x, y = load(os.path.join(a.probe_dir, "predictions.csv"), a.column)
    rng = np.random.default_rng(a.seed)
    if len(y) > a.samples:
        keep = rng.choice(len(y), a.samples, replace=False)
        x, y = x[keep], y[keep]
    try:
        result = with_pysr(x, y, a.seed)
    except Exception as e:  # no PySR, or no Julia: the stated fallback
        print(f"symbolic_regression: PySR not usable here ({type(e).__name__}: {str(e)[:120]}); using gplearn",
              file=sys.stderr)
        result = with_gplearn(x, y, a.seed)
    result.update({"column": a.column, "points": int(len(y)), "seed": a.seed})
    out = os.path.join(a.probe_dir, f"symbolic_{a.column}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"{a.column}: F = {result['formula']}  (mean |error| {result['loss']:.3g}, {result['size']} nodes, "
          f"{result['tool']}) -> {out}")


if __name__ == "__main__":
    main()
