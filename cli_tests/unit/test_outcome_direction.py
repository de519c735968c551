"""``outcome_direction: lower`` for select-policy and cate (issue #20): the release on −Y, with
the negated bounds, and Δ unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.unit.test_cate_method import dataset1
from cli_tests.unit.test_cate_method import make_spec as cate_spec
from dpcausal.commands.cate.method import METHOD as CATE
from dpcausal.commands.select_policy.method import METHOD as SP
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.mechanisms import NoiseGuard

ROOT = Path(__file__).resolve().parents[2]
NAMES = [f"x{j + 1}" for j in range(20)]


def sp_spec(outcome: list[float], **section: Any) -> SelectPolicySpec:
    sec = {"treated": 1, "control": 0, "library": {"generator": "paper160", "seed": 7},
           "split": {"kind": "seeded", "seed": 1}, "value_release": {"epsilon": 1.0}, **section}
    return SelectPolicySpec.model_validate({
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": NAMES}},
        "bounds": {"outcome": outcome, "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 2.0},
        "select_policy": sec,
    })


def _release(spec: SelectPolicySpec, frame: pd.DataFrame, side: dict[str, Any]
             ) -> tuple[Any, float, float]:
    plan = SP.plan(spec, len(frame), side, rng=np.random.default_rng(0))
    rel = SP.run(spec, frame, plan, side, rng=np.random.default_rng(0),
                 noise=NoiseGuard(plan, test_seed=11))
    doc = rel.documents["selection.json"]
    return doc["selected"]["name"], doc["value_release"]["estimate"], plan.details["delta_cert"]


@pytest.mark.parametrize("regime", ["learned", "frozen", "fixed"])
def test_select_policy_lower_is_higher_on_the_negated_outcome(regime: str) -> None:
    """lower on D = higher on D with Y (and the frozen model, the fixed scores) negated and the
    bounds negated: the same choice, the value back on the outcome's scale, the same Δ."""
    frame = pd.read_csv(ROOT / "sample_data" / "select_policy_obs.csv").iloc[:3000]
    flipped = frame.assign(Y=-frame["Y"], dr_treated=-frame["dr_treated"],
                           dr_control=-frame["dr_control"])
    model = json.loads((ROOT / "sample_data" / "select_policy_nuisance.json").read_text())
    neg = json.loads(json.dumps(model))
    neg["outcome"]["center"] = -model["outcome"]["center"]
    for arm in ("control", "treated"):
        neg["outcome"]["theta"][arm] = [-t for t in model["outcome"]["theta"][arm]]
    extra: dict[str, Any] = {"regime": regime}
    if regime == "frozen":
        extra["frozen_model"] = "m.json"
    if regime == "fixed":
        extra["fixed_scores"] = {"treated": "dr_treated", "control": "dr_control", "bound": 2.0}
    lower = _release(sp_spec([0.0, 1.0], outcome_direction="lower", mu_bounds=[0.0, 1.0],
                             **extra), frame, {"frozen_model": model})
    higher = _release(sp_spec([-1.0, 0.0], mu_bounds=[-1.0, 0.0], **extra), flipped,
                      {"frozen_model": neg})
    assert lower[0] == higher[0]
    assert lower[1] == -higher[1]
    assert lower[2] == higher[2]
    plain = _release(sp_spec([0.0, 1.0], mu_bounds=[0.0, 1.0], **extra), frame,
                     {"frozen_model": model})
    assert plain[2] == lower[2]  # Δ does not depend on the direction


def test_select_policy_lower_prefers_the_policy_of_smaller_outcome() -> None:
    """Two constant policies; treating lowers Y: lower picks always-treat, higher never-treat."""
    rng = np.random.default_rng(4)
    n = 4000
    x = rng.uniform(-1, 1, (n, 20))
    a = rng.integers(0, 2, n)
    frame = pd.DataFrame(x, columns=NAMES).assign(A=a, Y=np.clip(0.7 - 0.4 * a + 0.05 *
                                                                  rng.normal(size=n), 0, 1))
    lib = {"policies": [{"name": "treat", "type": "constant", "treat": True},
                        {"name": "never", "type": "constant", "treat": False}]}
    picks = {}
    for direction in ("higher", "lower"):
        spec = sp_spec([0.0, 1.0], outcome_direction=direction, library={"path": "lib.yaml"},
                       value_release={"epsilon": 200.0})
        spec = spec.model_copy(update={"privacy": spec.privacy.model_copy(
            update={"epsilon": 50.0})})
        picks[direction] = _release(spec, frame, {"library": lib})
    assert picks["higher"][0] == "never" and picks["lower"][0] == "treat"
    assert picks["lower"][1] == pytest.approx(0.3, abs=0.05)  # the mean outcome, not its negation


def test_cate_lower_releases_the_negated_effect() -> None:
    frame = dataset1(400, 3)
    out = {}
    for direction in ("higher", "lower"):
        spec = cate_spec(outcome_direction=direction)
        plan = CATE.plan(spec, len(frame), {}, rng=np.random.default_rng(0))
        rel = CATE.run(spec, frame, plan, {}, rng=np.random.default_rng(0),
                       noise=NoiseGuard(plan, test_seed=5))
        out[direction] = (rel.tables["cate"]["cate"].to_numpy(), plan)
    np.testing.assert_array_equal(out["lower"][0], -out["higher"][0])
    assert [e.sensitivity for e in out["lower"][1].events] == \
        [e.sensitivity for e in out["higher"][1].events]
    assert out["lower"][1].assumptions["estimand"].startswith("benefit(x) = E[Y(control)")
