"""Reproduce the experiments of "Double Robustness Is Not a Privacy Certificate" (spec §5):
Tables 1, 2, 3 and 5 on the rare-region DGP with simulated ACIC-like covariates.

    python benchmarks/select_policy_reproduction.py --table all --reps 10   # minutes on 2 cores
    python benchmarks/select_policy_reproduction.py --table 5 --reps 100
    python benchmarks/select_policy_reproduction.py --table 3 --reps 40 --covariates acic \
        --acic-csv benchmarks/_data/acic2016_x.csv --clip 0 --seed-offset 100000

``--seed-offset K`` adds K to every repetition's seed (a second, disjoint seed set for K ≥ 1000);
``--raw-out FILE`` writes every per-repetition value (read by ``benchmarks/reseed.py``). Each
reported column is the mean over repetitions; the JSON also holds its SE (sd/√reps) and median.
Table 4 (App. G.3, theorem proxy vs sampled audit) is computed from the Table 2 and 3 repetitions:
proxy Δ̂ = max{2B_ψ, n·ρ̂_pred} per repetition, proxy/floored its ratio to max{2B_ψ, 1.3·move}.

Covariates (``--covariates``): ``simulated`` (default, below) or ``acic``: the real ACIC 2016
table (``--acic-csv``: causallib 0.10.0 ships it; ``pip download causallib==0.10.0 --no-deps`` and
``unzip -p causallib-0.10.0-py3-none-any.whl causallib/datasets/data/acic_challenge_2016/x.csv``),
encoded by the same recipe. ``--clip C`` clips the encoded covariates to [−C, C] (default 3; 0 = no
clip: the paper clips only in its certified experiment, App. G.4).

Covariates: the paper's recipe (≥ 90%-numeric columns median-imputed and standardised, one-hot
categoricals) applied to a simulated 4,802 × 58 ACIC-like table (select_policy_sim;
the real ACIC 2016 file is not shipped; see ``--covariates acic``), first d = 20 encoded columns,
clipped to [-3, 3] unless ``--clip`` says otherwise. That
table is the public "pool": q₀.₉₅ of h_R and the true policy values (Monte Carlo over the pool's
known conditional means) are computed on it.

Learners. Boosted trees are XGBoost (``pip install xgboost-cpu``; squared error, subsample =
colsample = 1, one thread, fixed seed, exact tree method): stable = depth 3, 100 trees, lr 0.06,
λ = 6; unstable = depth 7, 180 trees, lr 0.06, λ = 1e-8. Propensity: scikit-learn logistic
regression (C = 1, or C = 1/max(0.1, λ) in the λ sweep) clipped to [ζ, 1 − ζ]. The certified
positive control (Table 5) runs dpcausal's own code path (certified ridge + logistic, Δ_cert).
Outcome predictions of the trees are clipped to [0, 1] (implied by the paper's B_ψ = 11).

Our choices where the paper is silent (spec §12): ε = 1 for every EM audit and regret; 0-based
covariate indices in the DGP; scoring blocks from the rare pool drawn with replacement;
Table 1 "stable" columns: the stable learner's EM calibrated with the stability-audit scale
max{2B_ψ, 1.3·move}, taken per n from the *other* half of the repetitions (so "cover" is not
1 by construction); Table 3 uses the stable learner and random adjacent pairs (one nuisance row
replaced by a fresh draw); Table 5 uses the targeted anchor pair of §5.2 with a standard scoring
block. Regret = max_π V(π) − Σ_π p(π)V(π) over the library (library-best reference).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.setup import build_setup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from select_policy_world import (
    EPS,
    FLOOR,
    NAMES,
    STABLE,
    TREE_METHOD,
    UNSTABLE,
    ZETA,
    World,
    llr,
    logit_fit,
    make_world,
    nuis_diag,
    rare_block,
    regret,
    rho_pred,
    targeted_pair,
    tree_nuisance,
    utilities,
)

from dpcausal.commands.select_policy.scores import fit_nuisance
from dpcausal.commands.select_policy.spec import SelectPolicySpec

RAW: dict[str, list[float]] = {}  # "table/row/column" -> per-repetition values (for reseed.py)


def summarise(rows: list[dict[str, float]], label: str) -> dict[str, float]:
    """Mean of every column over repetitions, plus ``<col>_se`` and ``<col>_median``.

    Also records the per-repetition values in RAW under "<label>/<col>".
    """
    out: dict[str, float] = {"reps": float(len(rows))}
    for k in rows[0]:
        v = np.array([rr[k] for rr in rows], dtype=float)
        RAW[f"{label}/{k}"] = v.tolist()
        out[k] = float(v.mean())
        out[f"{k}_se"] = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
        out[f"{k}_median"] = float(np.median(v))
    return out


# ----------------------------------------------------------------------------------- Table 1
def table1(w: World, reps: int, offset: int = 0) -> list[dict[str, float]]:
    sizes = [300, 700, 1200, 2000, 3000]
    rec: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for r in range(reps):
        rng = np.random.default_rng(100 + offset + r)
        xs, a, y_s, y_sp = targeted_pair(w, rng, 1500)
        logit = logit_fit(xs, a)  # A and X are identical in S and S′
        blocks = {n: rare_block(w, rng, n) for n in sizes}
        x_all = np.vstack([blocks[n][0] for n in sizes] + [w.x])  # + the pool, for RMSEs
        anchor_arm = int(a[0])
        preds: dict[str, dict[str, tuple[np.ndarray, ...]]] = {}
        for name, params in (("unstable", UNSTABLE), ("stable", STABLE)):
            n_s = tree_nuisance(params, xs, a, y_s, logit, x_all)
            other = {1 - anchor_arm: n_s[1 - anchor_arm]}  # that arm's rows did not change
            n_sp = tree_nuisance(params, xs, a, y_sp, logit, x_all, cache=other)
            preds[name] = {"S": n_s, "Sp": n_sp}
        n_pool = len(w.x)
        l2, dr_prod = nuis_diag(w, w.x, tuple(p[-n_pool:] for p in preds["unstable"]["S"]))
        start = 0
        for n in sizes:
            sl = slice(start, start + n)
            start += n
            xb, ab, yb = blocks[n]
            row: dict[str, float] = {}
            for name in ("unstable", "stable"):
                ns = tuple(p[sl] for p in preds[name]["S"])
                nsp = tuple(p[sl] for p in preds[name]["Sp"])
                u_d, u_dp = utilities(w, xb, ab, yb, ns), utilities(w, xb, ab, yb, nsp)
                row[f"{name}_move"] = float(np.max(np.abs(u_d - u_dp)))
                row[f"{name}_u"] = (u_d, u_dp)  # type: ignore[assignment]
                row["l2"], row["dr_prod"] = l2, dr_prod  # on the whole pool (population)
            row["naive_llr"] = llr(row["unstable_u"][0], row["unstable_u"][1], FLOOR)  # type: ignore[index]
            rec[n].append(row)
    out = []
    for n in sizes:
        rows = rec[n]
        half = max(1, len(rows) // 2)
        calib, held = rows[:half], rows[half:] or rows[:half]
        scale = max(FLOOR, 1.3 * max(rr["stable_move"] for rr in calib))
        per_rep = [{"nuis_L2": rr["l2"], "dr_prod": rr["dr_prod"],
                    "unstable_move": rr["unstable_move"],
                    "unstable_move_over_floor": rr["unstable_move"] / FLOOR,
                    "naive_llr_over_eps": rr["naive_llr"] / EPS,
                    "naive_fails": float(rr["naive_llr"] > EPS),
                    "stable_move": rr["stable_move"]} for rr in rows]
        held_rep = [{"stable_llr_over_eps": llr(*rr["stable_u"], scale) / EPS,  # type: ignore[misc]
                     "stable_cover": float(rr["stable_move"] <= scale)} for rr in held]
        out.append({"n": n, **summarise(per_rep, f"table1/n={n}"),
                    **summarise(held_rep, f"table1/n={n}"), "stable_scale": scale,
                    "reps": len(rows)})
    return out


# ----------------------------------------------------------------------------------- Table 2
def table2(w: World, reps: int, offset: int = 0) -> list[dict[str, float]]:
    grid = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]
    rec: dict[float, list[dict[str, float]]] = {lam: [] for lam in grid}
    for r in range(reps):
        rng = np.random.default_rng(200 + offset + r)
        xs, a, y_s, y_sp = targeted_pair(w, rng, 1500)
        xb, ab, yb = rare_block(w, rng, 1500)  # fixed across λ
        for lam in grid:
            logit = logit_fit(xs, a, 1.0 / max(0.1, lam))
            params = {**UNSTABLE, "reg_lambda": lam}
            n_s = tree_nuisance(params, xs, a, y_s, logit, xb)
            n_sp = tree_nuisance(params, xs, a, y_sp, logit, xb,
                                 cache={1 - int(a[0]): n_s[1 - int(a[0])]})
            u_d, u_dp = utilities(w, xb, ab, yb, n_s), utilities(w, xb, ab, yb, n_sp)
            move = float(np.max(np.abs(u_d - u_dp)))
            floored = max(FLOOR, 1.3 * move)
            rec[lam].append({"rho_pred": rho_pred(n_s, n_sp), "move": move, "floored": floored,
                             "floor_active": float(floored == FLOOR),
                             "regret": regret(w, u_d, floored)})
    out = []
    for lam, rows in rec.items():
        for rr in rows:
            rr["audit"] = 1.3 * rr["move"]
            rr["audit_over_floor"] = rr["audit"] / FLOOR
            _proxy(rr, 1500)
        out.append({"lambda": lam, **summarise(rows, f"table2/lambda={lam:g}")})
    return out


def _proxy(rr: dict[str, float], n: int) -> None:
    """Table 4 columns of one repetition: proxy Δ̂ = max{2B_ψ, n·ρ̂_pred} and proxy/floored."""
    rr["proxy"] = max(FLOOR, n * rr["rho_pred"])
    rr["proxy_over_floored"] = rr["proxy"] / rr["floored"]


# ----------------------------------------------------------------------------------- Table 3
def table3(w: World, reps: int, offset: int = 0, total: int = 3600,
           learner: dict[str, float] = STABLE, logit_c: float = 1.0) -> list[dict[str, float]]:
    fracs = [0.20, 0.25, 0.35, 0.50, 0.65, 0.75, 0.80]
    rec: dict[float, list[dict[str, float]]] = {f: [] for f in fracs}
    for r in range(reps):
        rng = np.random.default_rng(300 + offset + r)
        x = w.x[rng.choice(len(w.x), total, replace=True)]
        a, y = w.dgp.sample(x, rng)
        x_new = w.x[rng.choice(len(w.x), 1)]
        a_new, y_new = w.dgp.sample(x_new, rng)
        for f in fracs:
            m = int(f * total)
            xs, as_, ys = x[:m], a[:m], y[:m]
            xb, ab, yb = x[m:], a[m:], y[m:]
            i = int(rng.integers(0, m))
            xs2, as2, ys2 = xs.copy(), as_.copy(), ys.copy()
            xs2[i], as2[i], ys2[i] = x_new[0], a_new[0], y_new[0]
            n_s = tree_nuisance(learner, xs, as_, ys, logit_fit(xs, as_, logit_c), xb)
            n_sp = tree_nuisance(learner, xs2, as2, ys2, logit_fit(xs2, as2, logit_c), xb)
            u_d, u_dp = utilities(w, xb, ab, yb, n_s), utilities(w, xb, ab, yb, n_sp)
            move = float(np.max(np.abs(u_d - u_dp)))
            floored = max(FLOOR, 1.3 * move)
            rec[f].append({"m": m, "n": total - m, "nuis_rmse": nuis_diag(w, xb, n_s)[0],
                           "rho_pred": rho_pred(n_s, n_sp), "move": move, "floored": floored,
                           "rho_mu_part": (1 + 1 / ZETA) * max(np.abs(n_s[0] - n_sp[0]).max(),
                                                               np.abs(n_s[1] - n_sp[1]).max()),
                           "floor_active": float(floored == FLOOR),
                           "inv_sqrt_n": 1 / np.sqrt(total - m),
                           "regret": regret(w, u_d, floored)})
    out = []
    for f, rows in rec.items():
        for rr in rows:
            rr["audit"] = 1.3 * rr["move"]
            _proxy(rr, int(rr["n"]))
        out.append({"fit_frac": f, **summarise(rows, f"table3/frac={f:g}")})
    return out


# ----------------------------------------------------------------------------------- Table 5
def table5(w: World, reps: int, offset: int = 0) -> dict[str, float]:
    spec = SelectPolicySpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": NAMES}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": EPS},
        "select_policy": {"treated": 1, "control": 0, "lambda_mu": 50.0, "lambda_e": 50.0,
                          "split": {"kind": "index"},  # the first 1500 rows are the nuisance block
                          "zeta": ZETA, "library": {"generator": "paper160", "seed": 7,
                                                    "rare_threshold": w.dgp.q95}}})
    setup = build_setup(spec, 3000, {})
    assert setup.certificate is not None
    from dpcausal.learners import CertifiedLogistic, CertifiedRidge

    ridge = CertifiedRidge(50.0, (0.0, 1.0), (0.0, 1.0))
    logistic = CertifiedLogistic(50.0, ZETA)
    rows = []
    for r in range(reps):
        rng = np.random.default_rng(500 + offset + r)
        xs, a, y_s, y_sp = targeted_pair(w, rng, 1500)
        xb = w.x[rng.choice(len(w.x), 1500, replace=True)]
        ab, yb = w.dgp.sample(xb, rng)
        us, preds = [], []
        for ys in (y_s, y_sp):
            frame = pd.DataFrame(np.vstack([xs, xb]), columns=NAMES)
            frame["A"], frame["Y"] = np.concatenate([a, ab]), np.concatenate([ys, yb])
            us.append(compute_utilities(spec, setup, frame, {}))
            nuis = fit_nuisance(setup.inputs.fmap, ridge, logistic, xs, a == 1, ys)  # type: ignore[union-attr]
            preds.append(nuis.predict(xb))
        move = float(np.max(np.abs(us[0] - us[1])))
        rows.append({"emp_rho": rho_pred(preds[0], preds[1]), "move_over_cert":
                     move / setup.utility_sensitivity, "llr_over_eps": llr(us[0], us[1], setup.utility_sensitivity) / EPS,
                     "cover": float(move <= setup.utility_sensitivity), "regret": regret(w, us[0], setup.utility_sensitivity),
                     "nuis_rmse": nuis_diag(w, xb, preds[0])[0]})
    out = summarise(rows, "table5")
    out.update({"rho_star": setup.certificate.rho_star, "cert_delta": setup.utility_sensitivity,
                "rho_star_over_emp": float(np.mean([setup.certificate.rho_star / rr["emp_rho"]
                                                    for rr in rows])),
                "max_move_over_cert": max(rr["move_over_cert"] for rr in rows),
                "max_llr_over_eps": max(rr["llr_over_eps"] for rr in rows), "reps": reps})
    return out


def fmt(row: dict[str, Any]) -> str:
    """One result row: every mean column as "mean ± SE (median)"."""
    parts = []
    for k, v in row.items():
        if k.endswith(("_se", "_median")) or k == "reps":
            continue
        if f"{k}_se" in row:
            parts.append(f"{k}={v:.3g} ± {row[f'{k}_se']:.2g} ({row[f'{k}_median']:.3g})")
        else:
            parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", choices=["1", "2", "3", "5", "all"], default="all")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--reps-sweep", type=int, default=None, help="reps for Table 2 (default reps)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="added to every repetition's seed (use ≥ 1000 for a disjoint set)")
    ap.add_argument("--covariates", choices=["simulated", "acic"], default="simulated")
    ap.add_argument("--acic-csv", type=Path, default=Path("benchmarks/_data/acic2016_x.csv"))
    ap.add_argument("--clip", type=float, default=3.0, help="clip covariates to [-C, C]; 0 = none")
    ap.add_argument("--t3-learner", choices=["stable", "unstable"], default="stable",
                    help="boosted trees of Table 3 (the paper does not say which)")
    ap.add_argument("--tree-method", choices=["exact", "hist"], default="exact",
                    help="XGBoost tree method (the paper does not say; XGBoost's default is hist)")
    ap.add_argument("--t3-logit-c", type=float, default=1.0,
                    help="C of Table 3's logistic propensity (scikit-learn; default 1)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/select_policy_results.json"))
    ap.add_argument("--raw-out", type=Path, default=None,
                    help="write the per-repetition values here (for benchmarks/reseed.py)")
    args = ap.parse_args()
    TREE_METHOD["value"] = args.tree_method
    w = make_world(acic_csv=args.acic_csv if args.covariates == "acic" else None, clip=args.clip)
    run = f"{args.covariates}, clip {args.clip:g}, seed offset {args.seed_offset}" + (
        ", Table 3 unstable" if args.t3_learner == "unstable" else "") + (
        f", Table 3 logistic C {args.t3_logit_c:g}" if args.t3_logit_c != 1.0 else "") + (
        f", trees {args.tree_method}" if args.tree_method != "exact" else "")
    results: dict[str, Any] = {}
    todo = ["1", "2", "3", "5"] if args.table == "all" else [args.table]
    for t in todo:
        t0 = time.perf_counter()
        if t == "1":
            results["table1"] = table1(w, args.reps, args.seed_offset)
        elif t == "2":
            results["table2"] = table2(w, args.reps_sweep or args.reps, args.seed_offset)
        elif t == "3":
            results["table3"] = table3(w, args.reps, args.seed_offset, learner=(
                STABLE if args.t3_learner == "stable" else UNSTABLE), logit_c=args.t3_logit_c)
        else:
            results["table5"] = table5(w, args.reps, args.seed_offset)
        print(f"# Table {t} ({run}): {time.perf_counter() - t0:.0f} s", flush=True)
        res = results[f"table{t}"]
        for row in res if isinstance(res, list) else [res]:
            print("  " + fmt(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prev = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "table1" in prev:  # the former flat layout (one run, seed offset 0, simulated, clip 3)
        prev = {}
    prev.setdefault(run, {}).update(results)
    args.out.write_text(json.dumps(prev, indent=1, default=float) + "\n")
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(RAW) + "\n")


if __name__ == "__main__":
    main()
