"""Issue 16 for owl and two-stage, through the real CLI: the printed noise intervals cover at their
rate (≥ 2,000 seeded draws of the release's own mechanism at its own input; three arms for owl's
exact law, at least the level for two-stage's bound), the dry run predicts them, the guard refuses
before reading any row, --target-halfwidth plans ε, --epsilon overrides the spec, and --apply
writes margins with intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import dpcausal.pipeline as pipeline
from cli_tests.helpers import (
    assert_coverage_three_arm,
    coverage_three_arm,
    invoke,
    read_json,
    write_yaml,
)
from dpcausal.audit.blackbox import RecordingGuard
from dpcausal.commands.common.linear_rule import FeatureMap
from dpcausal.commands.two_stage import estimate as two_stage_estimate
from dpcausal.commands.two_stage.solver import qp_terms, solve_l1_ball_qp
from dpcausal.commands.two_stage.stage2 import release_rule
from dpcausal.mechanisms import NoiseGuard

ALPHA = 0.05
DRAWS = 2000


def spec(workdir: Path, name: str, mutate: Any = None) -> Path:
    doc = yaml.safe_load((workdir / "configs" / f"{name}.yaml").read_text())
    if mutate:
        mutate(doc)
    return write_yaml(workdir / f"{name}_test.yaml", doc)


def recording(monkeypatch: pytest.MonkeyPatch) -> list[RecordingGuard]:
    """Make the pipeline's guard keep its draws (seeded runs only), and return the guards."""
    guards: list[RecordingGuard] = []

    def make(plan: Any, *, test_seed: int | None = None) -> NoiseGuard:
        assert test_seed is not None
        guards.append(RecordingGuard(plan, test_seed=test_seed))
        return guards[-1]

    monkeypatch.setattr(pipeline, "NoiseGuard", make)
    return guards


def halfwidths(records: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r["interval"]["hi"] - r["estimate"] for r in records])


def test_owl_intervals_cover_at_their_rate(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guards = recording(monkeypatch)
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--test-noise-seed", "7", "--json"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "owl"
    rule = read_json(out / "rule.json")
    recs = pd.read_csv(out / "recommendations.csv")
    draw = guards[0].draws["owl.theta"]
    theta_hat = np.asarray(draw.value)
    thetas = draw.resample(DRAWS, test_seed=11)  # the release's mechanism at the release's input
    noise = thetas - theta_hat
    iv = rule["intervals"]
    assert (iv["level"], iv["kind"], iv["bound"]) == (0.95, "noise", False)
    # θ: every coordinate; h(f·scale) = f·h(scale) for this law, so the arms scale the printed h
    h_theta = halfwidths(iv["theta"])
    assert_coverage_three_arm(coverage_three_arm(np.abs(noise), lambda f: f * h_theta), ALPHA)
    # coefficients in original units: functionals of θ
    fmap = FeatureMap.from_dict(rule["feature_map"])
    a = fmap.original_units_matrix()
    h_coef = halfwidths(list(iv["coefficients_original_units"].values()))
    assert_coverage_three_arm(coverage_three_arm(np.abs(noise @ a.T), lambda f: f * h_coef), ALPHA)
    # each recommendation's margin, as printed in recommendations.csv
    v = fmap.transform(recs[list(fmap.names)].to_numpy(dtype=float))
    h_margin = (recs["margin_noise_hi"] - recs["margin"]).to_numpy()
    assert np.allclose(recs["margin"], v @ np.asarray(rule["theta"]))
    cov = coverage_three_arm(np.abs(noise @ v.T), lambda f: f * h_margin)
    assert_coverage_three_arm(cov, ALPHA)
    assert (recs["noise_could_flip"] == ((recs["margin_noise_lo"] <= 0)
                                         & (recs["margin_noise_hi"] >= 0))).all()
    # the dry run predicted what the release printed
    summary = json.loads(res.stdout)["summary"]
    assert summary["margin_noise_halfwidth_max"] == pytest.approx(h_theta[0])
    assert h_margin.max() <= summary["margin_noise_halfwidth_max"] * (1 + 1e-12)


def _capture_two_stage(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    real = release_rule

    def spy(spec: Any, setup: Any, plan: Any, h: Any, g: Any, n: int, side: Any, *,
            noise: Any, b: Any = None) -> Any:
        seen.update(spec=spec, setup=setup, plan=plan, h=h, g=g, n=n)
        return real(spec, setup, plan, h, g, n, side, noise=noise, b=b)

    monkeypatch.setattr(two_stage_estimate, "release_rule", spy)
    return seen


@pytest.mark.parametrize(("l1_radius", "noise"), [
    (1000.0, "gamma"),  # the ℓ1 ball never binds: a closed-form solve per draw
    pytest.param(1000.0, "gaussian", marks=pytest.mark.slow),
    pytest.param(30.0, "gamma", marks=pytest.mark.slow),  # the example: the ball binds
])
def test_two_stage_bound_covers(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                l1_radius: float, noise: str) -> None:
    seen = _capture_two_stage(monkeypatch)

    def mutate(doc: dict[str, Any]) -> None:
        doc["two_stage"].update(l1_radius=l1_radius, plot=False, apply_to=None, noise=noise)
        if noise == "gaussian":
            doc["privacy"]["delta"] = 1e-6
            doc["ledger"]["budget"]["delta"] = 1e-5

    res = invoke(["two-stage", "--spec", spec(workdir, "two_stage", mutate),
                  "--test-noise-seed", "3"])
    assert res.exit_code == 0, res.output
    rule = read_json(workdir / "out" / "two_stage" / "rule.json")
    iv = rule["intervals"]
    assert (iv["kind"], iv["bound"]) == ("noise", True)
    assert ("σ·χ" in iv["law"]) is (noise == "gaussian")
    h_theta = halfwidths(iv["theta"])
    sp, plan, h, g, n = seen["spec"], seen["plan"], seen["h"], seen["g"], seen["n"]
    gamma = float(plan.details["gamma"])
    p0, c0 = qp_terms(h, g, n, gamma, np.zeros(len(g)))
    theta0 = solve_l1_ball_qp(p0, c0, l1_radius).theta  # the same program without noise
    thetas = np.array([
        release_rule(sp, seen["setup"], plan, h, g, n, {},
                               noise=NoiseGuard(plan, test_seed=1000 + k))
        .documents["rule.json"]["theta"] for k in range(DRAWS)])
    err = np.abs(thetas - theta0)
    assert_coverage_three_arm(coverage_three_arm(err, lambda f: f * h_theta), ALPHA, bound=True)
    a = FeatureMap.from_dict(rule["feature_map"]).original_units_matrix()
    h_coef = halfwidths(list(iv["coefficients_original_units"].values()))
    cov = coverage_three_arm(np.abs((thetas - theta0) @ a.T), lambda f: f * h_coef)
    assert_coverage_three_arm(cov, ALPHA, bound=True)


@pytest.mark.parametrize("command", ["owl", "two_stage"])
def test_dry_run_predicts_and_the_guard_refuses_before_reading_rows(workdir: Path,
                                                                    command: str) -> None:
    cli = command.replace("_", "-")
    data = workdir / "sample_data" / ("owl_trial.csv" if command == "owl" else "two_stage_obs.csv")
    res = invoke([cli, "--spec", f"configs/{command}.yaml", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    acc = json.loads(res.stdout)["accuracy"]
    head = [a for a in acc if a["headline"]]
    assert len(head) == 1 and head[0]["quantity"] == "margin" and head[0]["level"] == 0.95
    assert head[0]["bound"] is (command == "two_stage")
    # the human dry run prints the table (names in brackets survive rich's markup)
    text = invoke([cli, "--spec", f"configs/{command}.yaml", "--dry-run"]).stdout
    assert "predicted accuracy" in text and "coef[x1]" in text and "margin *" in text
    # a data file whose rows cannot be read: the guard must refuse first (exit 3, not 2)
    lines = data.read_text().splitlines()
    lines[3] = ",".join(["oops", *lines[3].split(",")[1:]]) if command == "two_stage" else \
        lines[3].replace(lines[3].split(",")[1], "oops", 1)
    data.write_text("\n".join(lines) + "\n")
    broken = invoke([cli, "--spec", f"configs/{command}.yaml"])
    assert broken.exit_code == 2 and "oops" not in broken.stdout  # reading its rows fails
    limit = head[0]["halfwidth"] / 2

    def mutate(doc: dict[str, Any]) -> None:
        doc["accuracy"] = {"max_halfwidth": limit}

    path = spec(workdir, command, mutate)
    for extra in ([], ["--dry-run"], ["--json"]):
        res = invoke([cli, "--spec", path, *extra])
        assert res.exit_code == 3, res.output
        assert "accuracy.max_halfwidth" in res.stderr and "No row was read" in res.stderr
    assert not (workdir / "out" / command).exists()
    assert not (workdir / "out" / "ledger.jsonl").exists()
    if command == "owl":  # ε meets it: the message names it, and that ε is accepted
        msg = invoke([cli, "--spec", path]).stderr
        eps = float(msg.split("ε = ")[1].split(" would meet it")[0])
        ok = invoke([cli, "--spec", path, "--dry-run", "--json", "--epsilon", str(eps)])
        assert ok.exit_code == 0, ok.output
        plan = json.loads(ok.stdout)
        assert plan["epsilon"] == eps and plan["accuracy"][0]["halfwidth"] <= limit
    else:  # the bound does not shrink with ε at γ = γ_required: the message says so
        assert "two_stage.gamma" in invoke([cli, "--spec", path]).stderr


def test_target_halfwidth_and_epsilon_override(workdir: Path) -> None:
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--dry-run", "--json",
                  "--target-halfwidth", "0.2"])
    assert res.exit_code == 0, res.output
    target = json.loads(res.stdout)["target"]
    eps = target["smallest_epsilon"]
    assert target["quantity"] == "margin" and eps is not None
    # owl's half-width is exactly ∝ 1/ε: the smallest ε, rounded up to 3 significant digits
    exact = target["halfwidth_now"] * 5.0 / 0.2
    assert exact <= eps <= exact * 1.006 and eps == float(f"{eps:.3g}")
    text = invoke(["owl", "--spec", "configs/owl.yaml", "--dry-run", "--target-halfwidth",
                   "0.2"]).stdout
    assert f"smallest ε that meets it: {eps:g}" in text
    # --epsilon is what the release spends and charges
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--epsilon", "2.5", "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert receipt["epsilon"] == 2.5 and receipt["events"][0]["epsilon"] == 2.5
    assert receipt["ledger"]["spent_after"]["epsilon"] == 2.5
    # usage errors
    assert invoke(["owl", "--spec", "configs/owl.yaml", "--target-halfwidth", "1"]).exit_code == 2
    bad = invoke(["owl", "--spec", "configs/owl.yaml", "--dry-run", "--epsilon", "0"])
    assert bad.exit_code == 2 and "--epsilon" in bad.stderr


def test_apply_writes_margins_with_intervals(workdir: Path) -> None:
    assert invoke(["owl", "--spec", "configs/owl.yaml"]).exit_code == 0
    rule = workdir / "out" / "owl" / "rule.json"
    res = invoke(["owl", "--apply", rule, "--data", "sample_data/owl_new_patients.csv",
                  "--out", "applied"])
    assert res.exit_code == 0, res.output
    recs = pd.read_csv(workdir / "applied" / "recommendations.csv")
    released = pd.read_csv(workdir / "out" / "owl" / "recommendations.csv")
    pd.testing.assert_frame_equal(recs, released)
    # a rule written before intervals existed is applied as before
    doc = read_json(rule)
    del doc["intervals"]
    rule.write_text(json.dumps(doc))
    assert invoke(["owl", "--apply", rule, "--data", "sample_data/owl_new_patients.csv",
                   "--out", "old"]).exit_code == 0
    old = pd.read_csv(workdir / "old" / "recommendations.csv")
    assert list(old.columns)[-1] == "recommended"
