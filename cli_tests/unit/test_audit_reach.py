"""``audit privacy``'s default neighbours reach each charged stage's stated sensitivity (issue #13,
finding 5): the share they reach is pinned per command and stage, so a weaker pair generator —
under which an understated sensitivity would pass — fails here; and a sensitivity halved in the
plan and the run alike makes the default audit exit 4.

Ratios are those of the default run (--rows 1000, --pairs 50, --seed 0); the gray-box neighbours
come before the black-box releases, so ``--trials 0`` measures the same pairs.

Stages whose pairs reach less than 0.9, and why (the table: benchmarks/RESULTS.md):
- cate's nuisance stages (0.43 propensity, 0.18 outcome): with the box features x̃ = (1, s)/√(q+1)
  a label flip moves the logistic gradient by x̃ (≤ 1 of the bound's 2), and a ridge row's
  gradient by 2h·x̃ of the bound's 2h(1 + 1/√λ), whose ‖θ̂‖ ≤ h/√λ no data set comes near. Both
  stated bounds exceed what any pair found reaches by more than 2×, so a halved sensitivity
  stays under what is reached and no audit can flag it; the remedy is a tighter proof (not a
  weaker audit), left open. With K ≥ 3 arms (cate_3arm: 0.485 propensity, 0.358 outcome) the
  same holds: a label flip moves the multinomial gradient (p − e_A)x̃ by (e_a − e_b)x̃, norm √2 of
  the bound's 2√2 (p cancels at one x̃), and the ridge's as for two arms.
- cate's second stage (0.61): its stated sensitivity is 1.6× the proven bound by the spec's
  ``sensitivity_formula: max``; of the proven bound the pairs reach 0.97.
- cate's ATE (estimand: ate): the propensity model (0.71: its pair moves the gradient by
  (1 − σ)(x̃ − x̃′), two opposite corners, not the bound's 2); the group sizes and squared
  sums (0.50): their ℓ1 bounds 2m·sup v and 2m·E² need two rows in disjoint sets of m groups each,
  and the example's two abutting age groups (m = 2) cover every row, so a pair moves at most 2 of
  the 4 units (the bound is loose there; every other ATE stage reaches 1.0 up to rounding).
- select-policy's choice (0.55 two arms, 0.21 three arms): Δ_cert = 2B_ψ needs nuisance fits at
  the ends of their effective ranges, which the shrunk default fits do not reach.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_tests import injected_bugs as bugs
from cli_tests.helpers import invoke


def audit(spec: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    res = invoke(["audit", "privacy", "--spec", spec, "--json", *extra])
    report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    return res.exit_code, report, res.stderr


def ratios(spec: str, *extra: str) -> dict[str, float]:
    code, report, err = audit(spec, "--trials", "0", *extra)
    assert code == 0, err
    out: dict[str, float] = report["gray_box"]["max_sensitivity_ratio_per_stage"]
    return out


@pytest.mark.parametrize("weights", ["uniform", "ipw-rct"])
def test_two_stage_planted_pair_reaches_its_sensitivity_for_row_wise_weights(
        workdir: Path, weights: str) -> None:
    import yaml

    doc = yaml.safe_load((workdir / "configs" / "two_stage.yaml").read_text())
    doc["two_stage"].pop("ipw_known")
    doc["two_stage"]["weights"] = weights
    if weights == "ipw-rct":
        doc["two_stage"]["ipw_rct"] = {"p_treated": 0.3}
    (workdir / "ts.yaml").write_text(yaml.safe_dump(doc))
    code, report, err = audit("ts.yaml", "--trials", "0", "--pairs", "1")
    assert code == 0, err
    assert report["gray_box"]["max_sensitivity_ratio"] >= 0.95


REACHED = [  # (config, {stage: floor below the default run's measured ratio}, extra options)
    ("owl", {"owl.theta": 0.99}, ()),
    ("owl_mixed", {"owl.theta": 0.99}, ()),
    ("synth_control", {"synth_control.average_effect": 0.99, "synth_control.path": 0.99}, ()),
    ("cate", {"cate.nuisance.propensity": 0.42, "cate.nuisance.outcome": 0.17,
              "cate.second_stage.function": 0.60}, ("--pairs", "14")),
    ("cate_ate", {"cate.ate.nuisance.propensity": 0.70, "cate.ate.nuisance.outcome.sums": 0.99,
                  "cate.ate.nuisance.outcome.counts": 0.99, "cate.ate.estimate": 0.99,
                  "cate.ate.variance": 0.99, "cate.ate.groups.sums": 0.99,
                  "cate.ate.groups.sizes": 0.49, "cate.ate.groups.variance": 0.49},
     ("--pairs", "7")),
    # K = 3 arms: the quiet control-row flip attains the joint √2·Δ_ℋ (0.996); the nuisances
    # as for two arms (a label flip moves the multinomial gradient by √2·x̃ of the bound's 2√2)
    ("cate_3arm", {"cate.nuisance.propensity": 0.48, "cate.nuisance.outcome": 0.35,
                   "cate.second_stage.function": 0.99}, ("--pairs", "7")),
    ("select_policy", {"select_policy.choice": 0.54}, ()),
    ("select_policy_3arm", {"select_policy.choice": 0.20}, ()),
    # the searched planted pair (every covariate flipped, the intercept shared, θ on the
    # intercept vertex, the background at the least IPW weight) reaches √(10/11) ≈ 0.953: the
    # squared loss's symmetry (x, t) ~ (−x, −t) keeps the shared intercept from adding (before:
    # 0.617 over 50 pairs, so an understatement by up to 1.6× passed)
    ("two_stage", {"two_stage.objective_noise": 0.95, "two_stage.outcome_center": 0.99},
     ("--pairs", "1")),
]


@pytest.mark.parametrize(("config", "floors", "extra"), REACHED, ids=[c for c, _, _ in REACHED])
def test_default_neighbours_reach_each_stage(workdir: Path, config: str, floors: dict[str, float],
                                             extra: tuple[str, ...]) -> None:
    """Pairs beyond ``--pairs`` (when given) are the default run's first ones: the same pairs."""
    r = ratios(f"configs/{config}.yaml", *extra)
    assert set(r) == set(floors)
    for stage, floor in floors.items():
        assert floor <= r[stage] <= 1.0 + 1e-9, (stage, r)


def test_cate_ato_neighbours_reach_the_denominator(workdir: Path) -> None:
    """weights: overlap releases Σ ê(1 − ê), whose pairs need ê to vary over the box: the audit
    also conditions the score stages on a propensity model rising from κ to ½ along the first
    covariate, where a row moved along it attains sup v − inf v."""
    import yaml

    doc = yaml.safe_load((workdir / "configs" / "cate_ate.yaml").read_text())
    doc["cate"]["ate"]["weights"] = "overlap"
    (workdir / "ato.yaml").write_text(yaml.safe_dump(doc))
    r = ratios("ato.yaml", "--pairs", "8")
    for stage in ("cate.ate.estimate", "cate.ate.denominator", "cate.ate.variance",
                  "cate.ate.groups.sums"):
        assert 0.99 <= r[stage] <= 1.0 + 1e-9, (stage, r)


HALVED = [  # stages whose pairs reach more than half their stated sensitivity
    ("two_stage", bugs.halve_two_stage_sensitivity, ("--pairs", "1")),
    ("cate", bugs.halve_cate_rkhs_sensitivity, ("--pairs", "5")),
    ("cate_ate", bugs.halve_cate_ate_estimate_sensitivity, ("--pairs", "1")),
    ("cate_3arm", bugs.halve_cate_rkhs_sensitivity, ("--pairs", "1")),
    ("cate_3arm", bugs.drop_joint_contrast_factor, ("--pairs", "1")),
    ("select_policy", bugs.halve_select_policy_delta, ()),
    ("owl", bugs.halve_owl_sensitivity, ("--pairs", "4")),
    ("synth_control", bugs.halve_capped_sensitivity, ("--pairs", "4")),
]


@pytest.mark.parametrize("default", [pytest.param(True, marks=pytest.mark.slow, id="default"),
                                     pytest.param(False, id="gray-box")])
@pytest.mark.parametrize(("config", "bug", "fast"), HALVED,
                         ids=[f"{c}-{b.__name__}" for c, b, _ in HALVED])
def test_a_halved_sensitivity_exits_4(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                      config: str, bug: Any, fast: tuple[str, ...],
                                      default: bool) -> None:
    """At default settings (slow) and, in the default suite, on the gray-box pairs alone."""
    bug(monkeypatch)
    code, report, err = audit(f"configs/{config}.yaml",
                              *(() if default else ("--trials", "0", *fast)))
    assert code == 4, err
    assert report["gray_box"]["max_sensitivity_ratio"] > 1.0
