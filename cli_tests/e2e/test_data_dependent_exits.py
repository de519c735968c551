"""A refusal is an output (issue #13, findings 1 and 2): once the rows are read, whether a run exits 0
must not depend on them. Neighbouring data sets (one row replaced) at public settings that used to
flip the exit code — the mmd program's arm-size feasibility, ridge/logistic gradient checks at
extreme outcome ranges and penalties — now give the same exit code, and no message quotes a
data-dependent number."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import invoke, write_yaml
from dpcausal.commands.two_stage.setup import build_setup, prepare
from dpcausal.commands.two_stage.stage1 import compute_weights


def run_pair(tmp_path: Path, command: str, doc: dict[str, Any], frames: list[pd.DataFrame],
             extra: tuple[str, ...] = ()) -> list[Any]:
    """Run ``command`` on each frame (same spec, own data file and output dir); the results."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    results = []
    for k, frame in enumerate(frames):
        data = tmp_path / f"d{k}.csv"
        frame.to_csv(data, index=False)
        spec = write_yaml(tmp_path / f"s{k}.yaml", doc)
        results.append(invoke([command, "--spec", spec, "--data", data, "--out",
                               tmp_path / f"o{k}", "--quiet", *extra]))
    return results


def assert_no_number_quoted(output: str, allowed: tuple[str, ...] = ()) -> None:
    """No floating-point number in ``output`` other than the public ones in ``allowed``."""
    for tok in re.findall(r"\d+\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+", output):
        assert tok in allowed, f"message quotes {tok}: {output}"


# ----------------------------------------------------------------------------- two-stage mmd


def _two_stage_frame(n: int, treated: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 3))
    a = np.zeros(n, dtype=int)
    a[:treated] = 1
    y = x[:, 0] + (2 * a - 1) * x[:, 1] + rng.normal(size=n)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "a": a, "y": y})


def spec_doc(section: str, body: dict[str, Any], outcome: tuple[float, float], *,
             covariates: tuple[str, ...] = ("x0", "x1", "x2"),
             box: tuple[float, float] = (0.0, 1.0), delta: float = 0.0) -> dict[str, Any]:
    """A spec of one command on the columns (covariates…, a, y); paths come from the command line."""
    return {
        "data": {"path": "unused.csv",
                 "columns": {"outcome": "y", "treatment": "a", "covariates": list(covariates)}},
        "bounds": {"outcome": list(outcome), "covariates": list(box)},
        "privacy": {"epsilon": 1.0, "delta": delta},
        "output": {"dir": "unused"},
        section: body,
    }


def _mmd_doc() -> dict[str, Any]:
    return spec_doc("two_stage", {"treated": 1, "control": 0, "weights": "mmd",
                                  "sensitivity": "universal", "mmd": {"bandwidth": 1.0, "box": 5.0},
                                  "l1_radius": 5.0},
                    (-5.0, 5.0), covariates=("x1", "x2", "x3"), box=(-1.0, 1.0))


def test_two_stage_mmd_arm_size_never_decides_the_exit_code(tmp_path: Path) -> None:
    """n = 100, R_MMD = 5: the program is feasible with 20 treated rows and infeasible with 19 (one
    treated row replaced by a control row). Both runs release (the universal bound covers the
    fixed public fallback w = 1); on the old code the second exited 2."""
    d = _two_stage_frame(100, 20, seed=1)
    d2 = d.copy()
    d2.loc[0, "a"] = 0  # replace one treated row by a control row: 19 treated
    res = run_pair(tmp_path, "two-stage", _mmd_doc(), [d, d2])
    assert [r.exit_code for r in res] == [0, 0], [r.output for r in res]
    for k in (0, 1):
        assert (tmp_path / f"o{k}" / "rule.json").exists()
    plan = invoke(["two-stage", "--spec", tmp_path / "s0.yaml", "--data", tmp_path / "d0.csv",
                   "--dry-run", "--json"])
    assert "uniform weights" in plan.stdout  # the fallback is public, in the plan


def test_two_stage_fallback_is_the_uniform_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage-1 solve that fails under the universal bound gives exactly w = 1 (not a refusal)."""
    from dpcausal.commands.two_stage import weights as wts
    from dpcausal.commands.two_stage.spec import TwoStageSpec
    from dpcausal.errors import SolverError

    spec = TwoStageSpec.model_validate(_mmd_doc())
    setup = build_setup(spec)
    data = prepare(spec, setup, _two_stage_frame(60, 30, seed=2), None)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise SolverError("did not converge")

    monkeypatch.setattr(wts, "mmd_weights", fail)
    np.testing.assert_array_equal(compute_weights(spec, setup, data), np.ones(60))
    monkeypatch.setattr(wts, "mmd_weights", lambda *a, **k: np.full(60, np.nan))
    np.testing.assert_array_equal(compute_weights(spec, setup, data), np.ones(60))


# ----------------------------------------------------------------- ridge/logistic tolerances


def _obs_frame(n: int, hi: float, seed: int, covariates: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    out = pd.DataFrame(rng.uniform(0, 1, size=(n, covariates)),
                       columns=[f"x{j}" for j in range(covariates)])
    out["a"] = (rng.uniform(size=n) < 0.5).astype(int)
    out["y"] = rng.uniform(0, hi, n)
    return out


def _neighbour(frame: pd.DataFrame, seed: int, hi: float) -> pd.DataFrame:
    """Replace one random row by a fresh record inside the public bounds."""
    rng = np.random.default_rng(seed)
    out = frame.copy()
    i = int(rng.integers(len(out)))
    for c in out.columns:
        out.loc[i, c] = rng.uniform(0, hi) if c == "y" else (
            int(rng.integers(2)) if c == "a" else rng.uniform(0, 1))
    return out


def _cate_doc(hi: float) -> dict[str, Any]:
    return spec_doc("cate", {"grid": {"vary": ["x0"], "points": 5}, "plot": False}, (0.0, hi),
                    delta=1e-4)


def _select_doc(hi: float, library: Path) -> dict[str, Any]:
    return spec_doc("select_policy", {"treated": 1, "control": 0,
                                      "library": {"path": str(library)}}, (0.0, hi))


@pytest.mark.parametrize("hi", [1e-6, 1e9])
def test_cate_neighbours_at_extreme_outcome_ranges_release_alike(tmp_path: Path,
                                                                  hi: float) -> None:
    """On the old code the DP ridge's absolute 1e-9 gradient check refused most data sets at an
    outcome range of 1e9 (exit 2, quoting the gradient norm), so neighbours flipped 0 ↔ 2."""
    codes = []
    for seed in range(3):
        d = _obs_frame(80, hi, seed)
        res = run_pair(tmp_path / f"p{seed}", "cate", _cate_doc(hi),
                       [d, _neighbour(d, 100 + seed, hi)])
        codes += [r.exit_code for r in res]
        for r in res:
            assert_no_number_quoted(r.stderr)
    assert codes == [0] * 6, codes


@pytest.mark.parametrize("hi", [1e-6, 1e9])
def test_select_policy_neighbours_at_extreme_outcome_ranges_release_alike(tmp_path: Path,
                                                                           hi: float) -> None:
    """On the old code the certified ridge's absolute 1e-10 gradient check refused about half of
    the data sets at an outcome range of 1e8–1e9, so neighbours flipped 0 ↔ 2."""
    library = write_yaml(tmp_path / "lib.yaml", {"policies": [
        {"name": "all", "type": "constant", "treat": True},
        {"name": "none", "type": "constant", "treat": False},
        {"name": "x0", "type": "threshold", "covariate": "x0", "op": ">=", "threshold": 0.5}]})
    codes = []
    for seed in range(3):
        d = _obs_frame(120, hi, seed)
        res = run_pair(tmp_path / f"p{seed}", "select-policy", _select_doc(hi, library),
                       [d, _neighbour(d, 200 + seed, hi)])
        codes += [r.exit_code for r in res]
        for r in res:
            assert_no_number_quoted(r.stderr)
    assert codes == [0] * 6, codes


# ------------------------------------------------ the other commands at extreme public scales


def _owl_doc(lo: float, hi: float, gamma: float) -> dict[str, Any]:
    return spec_doc("owl", {"treated": 1, "propensity": 0.5, "gamma": gamma}, (lo, hi))


def _two_stage_doc(lo: float, hi: float, ridge: float, sensitivity: str) -> dict[str, Any]:
    return spec_doc("two_stage", {"treated": 1, "control": 0, "weights": "ipw-logit",
                                  "ipw_logit": {"radius": 0.3, "ridge": ridge},
                                  "sensitivity": sensitivity, "l1_radius": 5.0}, (lo, hi))


def _shifted(frame: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    out = frame.copy()
    out["y"] = lo + (hi - lo) * out["y"]
    return out


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1e-6), (-1e9, 1e9), (1e9, 1e9 + 1e-6)])
@pytest.mark.parametrize("gamma", [1e-3, 1e6])
def test_owl_neighbours_at_extreme_scales_exit_alike(tmp_path: Path, lo: float, hi: float,
                                                     gamma: float) -> None:
    d = _shifted(_obs_frame(80, 1.0, seed=4), lo, hi)
    res = run_pair(tmp_path, "owl", _owl_doc(lo, hi, gamma),
                   [d, _shifted(_neighbour(_obs_frame(80, 1.0, seed=4), 7, 1.0), lo, hi)])
    assert [r.exit_code for r in res] == [0, 0], [r.output for r in res]


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1e-6), (-1e9, 1e9)])
@pytest.mark.parametrize(("ridge", "sensitivity"), [(1e-6, "universal"), (1e4, "universal"),
                                                     (1.0, "method")])
def test_two_stage_neighbours_at_extreme_scales_exit_alike(tmp_path: Path, lo: float, hi: float,
                                                           ridge: float, sensitivity: str) -> None:
    base = _obs_frame(80, 1.0, seed=5)
    frames = [_shifted(base, lo, hi), _shifted(_neighbour(base, 9, 1.0), lo, hi)]
    res = run_pair(tmp_path, "two-stage", _two_stage_doc(lo, hi, ridge, sensitivity), frames)
    assert [r.exit_code for r in res] == [0, 0], [r.output for r in res]


def _panel(n_donors: int, t: int, seed: int, lo: float, hi: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.uniform(size=t)
    rows = []
    for u in range(n_donors + 1):
        # donors 1 and 2 are copies (collinear): a tiny λ would make the Gram matrix singular
        series = base if u in (1, 2) else rng.uniform(size=t)
        rows += [{"unit": f"u{u}", "year": 2000 + k, "y": lo + (hi - lo) * v}
                 for k, v in enumerate(series)]
    return pd.DataFrame(rows)


def _synth_doc(lo: float, hi: float, lam: float | str) -> dict[str, Any]:
    return {
        "data": {"path": "unused.csv", "columns": {"unit": "unit", "time": "year", "outcome": "y"}},
        "bounds": {"outcome": [lo, hi]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": "unused"},
        "synth_control": {"target": "u0", "treatment_time": 2010, "lambda": lam},
    }


@pytest.mark.parametrize(("lo", "hi", "lam", "code"), [
    (0.0, 1e-6, "T0", 0), (-1e9, 1e9, "T0", 0), (0.0, 1.0, 1e-30, 2), (0.0, 1.0, 1e6, 0)])
def test_synth_control_neighbours_at_extreme_scales_exit_alike(
        tmp_path: Path, lo: float, hi: float, lam: float | str, code: int) -> None:
    """A λ too small for a Cholesky solve that cannot fail is refused by the plan (from public
    settings, the same for both neighbours); on the old code the factorisation failed on the
    collinear donors (exit 1) and would not on a neighbour without them."""
    d = _panel(4, 14, 1, lo, hi)
    d2 = d.copy()
    donor = d2["unit"] == "u3"  # replace one donor's whole series
    d2.loc[donor, "y"] = lo + (hi - lo) * np.random.default_rng(2).uniform(size=int(donor.sum()))
    res = run_pair(tmp_path, "synth-control", _synth_doc(lo, hi, lam), [d, d2])
    assert [r.exit_code for r in res] == [code, code], [r.output for r in res]
    if code:
        assert "synth_control.lambda" in res[0].stderr


def test_two_stage_stage2_verifies_at_extreme_scales_and_never_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At an outcome range of ±1e9 the KKT check of the ℓ₁-ball QP used to fail on the rounding of
    θ (exit 2, data-dependent); its constraint tolerance now follows the solve's scale, and an
    unverifiable active set is solved exactly by the dual method (the same θ*), never refused."""
    from dpcausal.commands.two_stage import solver as tss

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(80, 4))
    h, g = tss.sufficient_stats(x, rng.uniform(-2e9, 2e9, 80), np.ones(80))
    p, c = tss.qp_terms(h, g, 80, 0.5, rng.normal(size=4))
    sol = tss.solve_l1_ball_qp(p, c, 5.0)
    assert sol.constraint_active and sol.active_set_iterations < 4 * 4 + 20  # verified
    monkeypatch.setattr(tss, "_kkt_ok", lambda *a, **k: False)
    fallback = tss.solve_l1_ball_qp(p, c, 5.0)
    assert fallback.exact_dual and fallback.theta.tolist() == sol.theta.tolist()


@pytest.mark.parametrize("lam", [1e-12, 1e-5, 1e5])
def test_cate_and_select_policy_pairs_at_extreme_penalties_exit_alike(tmp_path: Path,
                                                                      lam: float) -> None:
    """Tiny and huge penalties at an outcome range of 1e9: both neighbours release, or the plan
    refuses both from the public settings alone (exit 2, naming the field), never one of them."""
    library = write_yaml(tmp_path / "lib.yaml", {"policies": [
        {"name": "all", "type": "constant", "treat": True},
        {"name": "none", "type": "constant", "treat": False}]})
    cate_doc = _cate_doc(1e9)
    cate_doc["cate"]["nuisance"] = {"propensity_l2": lam, "outcome_l2": lam}
    cate_doc["cate"]["ridge"] = max(lam, 1e-3)  # a second stage the plan accepts
    sel_doc = _select_doc(1e9, library)
    sel_doc["select_policy"].update(lambda_mu=lam, lambda_e=lam)
    refused = []
    for command, doc, n in (("cate", cate_doc, 80), ("select-policy", sel_doc, 120)):
        d = _obs_frame(n, 1e9, seed=8)
        res = run_pair(tmp_path / command, command, doc, [d, _neighbour(d, 31, 1e9)])
        codes = [r.exit_code for r in res]
        assert codes in ([0, 0], [2, 2]), (command, [r.output for r in res])
        if codes == [2, 2]:
            field = "cate.nuisance." if command == "cate" else "select_policy.lambda_"
            assert lam < 1e-4 and field in res[0].stderr, res[0].stderr
        refused.append(codes == [2, 2])
    assert refused == [lam < 1e-4] * 2  # only the tiny penalty is refused (by both commands)


def test_owl_releases_with_the_stated_sensitivity_when_the_fast_solve_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: owl exited 2 (SolverError, after the data was read) when Newton, Newton from 0
    and L-BFGS-B all missed τ, so a neighbour on which the solve misses flipped exit 0 → 2. With
    every fast stage forced to fail the run now releases through the guaranteed fallback, with
    the sensitivity of the plan (the same receipt as when the fast path certifies)."""
    from dpcausal.solvers import erm

    frames = [_obs_frame(60, 1.0, seed=4), _neighbour(_obs_frame(60, 1.0, seed=4), 7, 1.0)]
    doc = _owl_doc(0.0, 1.0, 5.0)
    fast = run_pair(tmp_path / "fast", "owl", doc, frames, ("--json",))
    monkeypatch.setattr(erm, "newton", lambda backend, theta, acc, **kw: (
        theta, np.full(theta.size, np.inf), kw["max_newton"]))
    monkeypatch.setattr(erm, "lbfgs_start", lambda backend, acc: np.zeros(acc.d))
    slow = run_pair(tmp_path / "slow", "owl", doc, frames, ("--json",))
    assert [r.exit_code for r in fast + slow] == [0, 0, 0, 0], [r.output for r in slow]
    events = [json.loads(r.stdout)["events"][0] for r in fast + slow]
    assert len({e["sensitivity"] for e in events}) == 1
    assert len({e["params"]["solver_fallback_steps"] for e in events}) == 1


@pytest.mark.parametrize("weights", ["ipw-logit", "ebw"])
def test_two_stage_releases_with_the_stated_sensitivity_when_stage1_cannot_certify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights: str
) -> None:
    """Issue 13: with `sensitivity: method` a stage-1 dual whose Newton solve failed or whose
    certificate missed η/2 raised SolverError (exit 2, after the data was read), so a neighbour on
    which the solve misses flipped exit 0 → 2. With both forced to fail the run now releases
    through the guaranteed fallback (projected gradient descent for a public number of steps,
    within η/2 by proof), with the sensitivity of the plan."""
    from dpcausal.commands.two_stage import dual
    from dpcausal.errors import SolverError

    section = ({"ipw_logit": {"radius": 0.3, "ridge": 1.0}} if weights == "ipw-logit" else
               {"ebw": {"radius": 0.5, "ridge": 10.0, "min_arm_fraction": 0.3,
                        "arm_totals": "sample"}})
    doc = spec_doc("two_stage", {"treated": 1, "control": 0, "weights": weights,
                                 "sensitivity": "method", "l1_radius": 5.0, **section},
                   (0.0, 1.0))
    base = _obs_frame(80, 1.0, seed=5)
    frames = [base, _neighbour(base, 9, 1.0)]
    fast = run_pair(tmp_path / "fast", "two-stage", doc, frames, ("--json",))
    plan = invoke(["two-stage", "--spec", tmp_path / "fast" / "s0.yaml", "--data",
                   tmp_path / "fast" / "d0.csv", "--dry-run", "--json"])
    details = json.loads(plan.stdout)["details"]
    assert details["stage1_certified"] is True, plan.stdout
    assert "projected gradient descent" in details["stage1_fallback"]
    real_newton = dual._ball_newton

    def failing_newton(fun: Any, x0: Any, radius: float, **kwargs: Any) -> Any:
        if kwargs.get("strict", True):
            raise SolverError("stage-1 solve did not converge")
        return real_newton(fun, x0, radius, **kwargs)

    monkeypatch.setattr(dual, "_ball_newton", failing_newton)
    monkeypatch.setattr(dual, "_certified", lambda *args, **kwargs: None)
    slow = run_pair(tmp_path / "slow", "two-stage", doc, frames, ("--json",))
    assert [r.exit_code for r in fast + slow] == [0, 0, 0, 0], [r.output for r in slow]
    events = [json.loads(r.stdout)["events"][0] for r in fast + slow]
    assert len({e["sensitivity"] for e in events}) == 1
    assert len({json.dumps(e["params"]["stability"], sort_keys=True) for e in events}) == 1


def test_cate_rff_releases_with_the_stated_sensitivity_when_newton_cannot_certify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: cate's random-feature second stage raised SolverError (exit 2, after the data
    was read) when a Newton system was not positive definite or 100 steps missed the tolerance,
    so a neighbour on which the solve misses flipped exit 0 → 2. With Newton forced to fail the
    run now releases through the guaranteed fallback (projected gradient descent for a public
    number of passes, within the planned distance by proof), with the sensitivity of the plan."""
    from dpcausal.commands.cate import rff as cate_rff

    doc = spec_doc("cate", {"grid": {"vary": ["x0"], "points": 5}, "plot": False,
                            "features": "rff", "rff_dim": 20, "ridge": 0.05},
                   (0.0, 1.0), delta=1e-4)
    base = _obs_frame(80, 1.0, seed=6)
    frames = [base, _neighbour(base, 11, 1.0)]
    fast = run_pair(tmp_path / "fast", "cate", doc, frames, ("--json",))
    monkeypatch.setattr(cate_rff, "_newton_direction", lambda lhs, rhs: None)
    slow = run_pair(tmp_path / "slow", "cate", doc, frames, ("--json",))
    assert [r.exit_code for r in fast + slow] == [0, 0, 0, 0], [r.output for r in slow]
    events = [json.loads(r.stdout)["events"][-1] for r in fast + slow]
    assert len({e["sensitivity"] for e in events}) == 1
    assert len({e["params"]["solver_fallback_steps"] for e in events}) == 1
    for r in slow:
        assert_no_number_quoted(r.stderr)


def test_cate_rff_plan_refuses_a_fallback_too_long_before_reading_rows(tmp_path: Path) -> None:
    """A ridge so small that the guaranteed fallback would need more than MAX_FALLBACK_STEPS
    passes is refused by the plan (exit 2, public inputs only), dry run included."""
    doc = spec_doc("cate", {"grid": {"vary": ["x0"], "points": 5}, "plot": False,
                            "features": "rff", "rff_dim": 20, "ridge": 1e-5},
                   (0.0, 1.0), delta=1e-4)
    res = run_pair(tmp_path, "cate", doc, [_obs_frame(80, 1.0, seed=6)], ("--dry-run",))[0]
    assert res.exit_code == 2, res.output
    assert "cate.ridge" in res.stderr and "fallback" in res.stderr


def _fail_second_stage_cholesky(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the exact-kernel second stage's Cholesky (lower, overwrite, unchecked: that call's
    signature only) report 'not positive definite', as rounding can on extreme data."""
    from scipy import linalg

    real = linalg.cho_factor

    def flaky(a: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("overwrite_a") and kwargs.get("lower") and not kwargs.get("check_finite"):
            raise linalg.LinAlgError("not positive definite")
        return real(a, *args, **kwargs)

    monkeypatch.setattr(linalg, "cho_factor", flaky)


@pytest.mark.parametrize(("mode", "hi"), [("function", 1e-6), ("function", 1e9),
                                          ("queries", 1e9)])
def test_cate_exact_kernel_releases_with_the_stated_sensitivity_when_newton_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, hi: float
) -> None:
    """Issue 13: the exact-kernel second stage (fit_krr) raised SolverError (exit 2, after the
    data was read) when an active-set system was not numerically positive definite or 100 Newton
    steps missed the tolerance, so a neighbour on which the solve missed flipped exit 0 → 2. Now
    such a solve ends in the guaranteed fallback (gradient descent in the RKHS for a public number
    of steps, within the planned distance by proof): random neighbour pairs at extreme outcome
    ranges all release, with the plan's sensitivity and solver bound, and quote no number."""
    body: dict[str, Any] = {"grid": {"vary": ["x0"], "points": 5}, "plot": False}
    n = 80
    if mode == "queries":
        body.update(mode="queries", gamma_method="certified")
        n = 220
    doc = spec_doc("cate", body, (0.0, hi), delta=1e-4)
    _fail_second_stage_cholesky(monkeypatch)
    results = []
    for seed in range(2):
        base = _obs_frame(n, hi, seed=20 + seed)
        results += run_pair(tmp_path / f"p{seed}", "cate", doc,
                            [base, _neighbour(base, 40 + seed, hi)], ("--json",))
    assert [r.exit_code for r in results] == [0] * 4, [r.output for r in results]
    events = [json.loads(r.stdout)["events"][-1] for r in results]
    assert len({json.dumps(e, sort_keys=True) for e in events}) == 1
    assert events[0]["params"]["solver_fallback_steps"] > 0
    for r in results:
        assert_no_number_quoted(r.stderr)


def test_cate_exact_kernel_plan_refuses_a_ridge_too_small_before_reading_rows(
    tmp_path: Path
) -> None:
    """A ridge so small that the exact kernel's guaranteed fallback would be too long (or its
    rounding allowance too large) is refused by the plan (exit 2, public inputs only)."""
    doc = spec_doc("cate", {"grid": {"vary": ["x0"], "points": 5}, "plot": False,
                            "ridge": 1e-6}, (0.0, 1.0), delta=1e-4)
    res = run_pair(tmp_path, "cate", doc, [_obs_frame(80, 1.0, seed=6)], ("--dry-run",))[0]
    assert res.exit_code == 2, res.output
    assert "cate.ridge" in res.stderr


def test_numeric_warnings_after_the_rows_are_read_reach_no_stream(tmp_path: Path) -> None:
    """A RuntimeWarning raised while a method runs on the rows (overflow, log of 0) would print a
    data-dependent line on stderr; the pipeline silences them (whole process, warnings on)."""
    import subprocess
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((repo / "configs" / "owl.yaml").read_text())
    doc.pop("ledger")
    doc["owl"].pop("apply_to", None)
    spec = write_yaml(tmp_path / "owl.yaml", doc)
    script = (
        "import sys, numpy as np\n"
        "import dpcausal.commands.owl.estimate as est\n"
        "real = est.run\n"
        "def run(*a, **k):\n"
        "    np.log(np.zeros(1))  # RuntimeWarning: divide by zero, after the rows are read\n"
        "    return real(*a, **k)\n"
        "est.run = run\n"
        "from dpcausal.cli import app\n"
        f"sys.argv = ['dpcausal', 'owl', '--spec', {str(spec)!r}, '--out', "
        f"{str(tmp_path / 'o')!r}, '--quiet']\n"
        "app()\n")
    res = subprocess.run([sys.executable, "-W", "always", "-c", script], cwd=repo,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr and res.stderr == "", res.stderr
