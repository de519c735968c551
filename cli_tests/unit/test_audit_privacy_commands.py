"""audit privacy on the shipped commands beyond owl/synth-control: each example config passes in
its certified configuration, and the known-broken variants (test fixtures only, never shipped)
fail with exit 4."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import yaml
from sklearn.tree import DecisionTreeRegressor

from cli_tests.helpers import invoke, write_yaml
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.audit.estimators import event_loss
from dpcausal.commands.select_policy import audit as spa
from dpcausal.commands.select_policy import certify as sp_certify
from dpcausal.commands.select_policy import estimate as sp_estimate
from dpcausal.commands.select_policy import penalty as sp_penalty
from dpcausal.commands.select_policy.setup import STAGE_CHOICE, STAGE_VALUE, split_indices
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.learners import CertifiedLogistic, CertifiedRidge, UnitBoxFeatures

REPO = Path(__file__).resolve().parents[2]
FloatArray = npt.NDArray[np.float64]


def audit(spec: Path | str, *args: str) -> tuple[int, dict[str, Any], str]:
    res = invoke(["audit", "privacy", "--spec", str(spec), "--json", *args])
    report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    return res.exit_code, report, res.stderr


# ------------------------------------------------------------------ estimator extension
def test_conditional_inputs_take_the_worst_row() -> None:
    """2-D inputs: one candidate input per earlier released value; the loss is the worst row's."""
    ev = PrivacyEvent("laplace", "v", 1.0, 0.0, 2.0, "l1", 2.0)
    a = np.array([[0.0], [1.0], [5.0]])
    b = np.array([[1.0], [1.0], [3.0]])
    loss = event_loss(ev, a, b)
    assert loss.epsilon_loss == pytest.approx(1.0)  # row 3: |5 − 3|/2, not the ℓ1 sum 1.5
    assert loss.shift == pytest.approx(2.0)
    with pytest.raises(ValueError, match="same non-empty shape"):
        event_loss(ev, a, b[:2])


# ------------------------------------------------------------------ select-policy
def test_audit_passes_shipped_select_policy(workdir: Path) -> None:
    code, report, err = audit("configs/select_policy.yaml", "--rows", "200", "--pairs", "8",
                              "--trials", "100")
    assert code == 0, err
    assert report["command"] == "select-policy" and report["verdict"] == "pass"
    g = report["gray_box"]
    assert g["max_privacy_loss"] <= 1.0 and g["max_sensitivity_ratio"] <= 1.0
    assert report["black_box"]["epsilon_lower_bound"] <= 1.0


def test_audit_select_policy_on_the_sample_file(workdir: Path) -> None:
    """With --data the neighbours (incl. the anchor pair) are built around the real 3,000 rows."""
    code, report, err = audit("configs/select_policy.yaml", "--data",
                              "sample_data/select_policy_obs.csv", "--pairs", "4", "--trials", "0")
    assert code == 0, err
    assert report["rows"] == 3000 and report["verdict"] == "pass"


def test_select_policy_neighbours_replace_one_row_in_place(workdir: Path) -> None:
    spec = SelectPolicySpec.model_validate(yaml.safe_load(
        (workdir / "configs" / "select_policy.yaml").read_text()))
    rng = np.random.default_rng(0)
    frame = spa.synthesize(spec, 60, rng)
    # the gray-box split the audit conditions on (the command's default split is secret/random)
    tr, sc_rows = split_indices(spa.audit_spec(spec), 60, 30)
    kinds = []
    for name, first, other in spa.neighbours(spec, frame, rng, 8):
        base = frame if first is None else first
        assert len(other) == len(base) == 60 and list(other.index) == list(base.index)
        diff = ~((base == other) | (base.isna() & other.isna())).all(axis=1)
        assert int(diff.sum()) == 1, name  # D and D′ differ in exactly one row, at its index
        kinds.append((name.split()[0], int(np.flatnonzero(diff.to_numpy())[0])))
        if name.startswith("anchor"):
            row = int(np.flatnonzero(diff.to_numpy())[0])
            assert row in tr  # the anchor is a nuisance-block row of the audit's split
            assert base["Y"].iloc[row] == 1.0 and other["Y"].iloc[row] == 0.0
            sc = base.iloc[sc_rows]
            assert (sc["A"] != base["A"].iloc[row]).all()  # scoring rows: the other arm
    assert {k for k, _ in kinds} >= {"anchor", "nuisance", "scoring"}


class FlexibleNuisance:
    """Uncertified outcome model (spec §3.4/§3.5): clipped 1-NN or a fully grown tree per arm;
    the propensity stays the certified logistic."""

    def __init__(self, kind: str, fmap: UnitBoxFeatures, ridge: CertifiedRidge,
                 logistic: CertifiedLogistic, x: FloatArray, treated: npt.NDArray[np.bool_],
                 y: FloatArray) -> None:
        self.fmap, self.kind = fmap, kind
        self.mu_bounds = ridge.mu_bounds
        xt = fmap.transform(x)
        yc = np.clip(y, *ridge.y_bounds)
        self.x = [xt[treated == bool(a)] for a in (0, 1)]
        self.y = [yc[treated == bool(a)] for a in (0, 1)]
        self.trees = [DecisionTreeRegressor(random_state=0).fit(self.x[a], self.y[a])
                      for a in (0, 1)] if kind == "tree" else []
        self.prop = logistic.fit(xt, treated)

    def _mu(self, xt: FloatArray, a: int) -> FloatArray:
        if self.kind == "tree":
            pred = self.trees[a].predict(xt)
        else:
            d2 = ((xt[:, None, :] - self.x[a][None, :, :]) ** 2).sum(axis=-1)
            pred = self.y[a][np.argmin(d2, axis=1)]
        return np.clip(pred, *self.mu_bounds)

    def predict(self, x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        xt = self.fmap.transform(x)
        return self._mu(xt, 0), self._mu(xt, 1), self.prop.predict(xt)


def break_select_policy(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The paper's naive calibration Δ = 2B_ψ with a flexible nuisance learner (test fixture)."""
    monkeypatch.setattr(sp_estimate, "fit_nuisance",
                        lambda fmap, ridge, logistic, x, t, y: FlexibleNuisance(
                            kind, fmap, ridge, logistic, x, t, y))
    real = sp_penalty.certify_spillover

    def naive(**kw: Any) -> Any:
        cert = real(**kw)
        return dataclasses.replace(cert, delta_cert=cert.floor_2Bpsi)

    # where select-policy calls it: penalty.py for two arms, certify.py for K arms
    monkeypatch.setattr(sp_penalty, "certify_spillover", naive)
    monkeypatch.setattr(sp_certify, "certify_spillover", naive)


def paper_select_policy(workdir: Path) -> Path:
    """The example spec in the paper's setting: λ = 50, clips at the spec's ranges (2B_ψ = 22)."""
    doc = yaml.safe_load((workdir / "configs" / "select_policy.yaml").read_text())
    doc["select_policy"].update(lambda_mu=50.0, lambda_e=50.0, effective_bounds=False)
    return write_yaml(workdir / "sp_paper.yaml", doc)


@pytest.mark.parametrize("kind", ["1nn", "tree"])
def test_audit_fails_naive_select_policy_with_flexible_learner(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    break_select_policy(monkeypatch, kind)
    code, report, err = audit(paper_select_policy(workdir), "--rows", "400", "--pairs", "4",
                              "--trials", "0")
    assert code == 4, err
    g = report["gray_box"]
    assert g["closest_pair"].startswith("anchor row")
    # the anchor moves every one of the n = 200 scoring summands by the μ range 1: move = n = 200,
    # i.e. 200/22 = 9.09× the naive Δ = 2B_ψ = 22 (spec App. F)
    assert g["max_sensitivity_ratio"] == pytest.approx(200 / 22)
    assert g["max_privacy_loss"] > 2.0  # exact EM log-ratio; ε = 1 is claimed
    assert "exceeds the claimed ε" in err


@pytest.mark.statistical
def test_black_box_also_catches_naive_select_policy(workdir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    break_select_policy(monkeypatch, "tree")
    # default size (10,000 choices a side); D and D′ run with the audit's coupled split, so the
    # planted anchor is in the nuisance block on both sides
    code, report, err = audit(paper_select_policy(workdir), "--rows", "400", "--pairs", "4")
    assert code == 4, err
    assert report["black_box"]["epsilon_lower_bound"] > 1.0


def test_audit_passes_select_policy_with_value_release(workdir: Path) -> None:
    doc = yaml.safe_load((workdir / "configs" / "select_policy.yaml").read_text())
    doc["select_policy"]["value_release"] = {"epsilon": 0.5}
    spec = write_yaml(workdir / "sp_value.yaml", doc)
    code, report, err = audit(spec, "--rows", "120", "--pairs", "8", "--trials", "0")
    assert code == 0, err
    assert report["claimed"]["epsilon"] == pytest.approx(1.5)
    assert set(report["gray_box"]["max_loss_per_stage"]) == {STAGE_CHOICE, STAGE_VALUE}


# ------------------------------------------------------------------ cate
class _AtDistance:
    def __init__(self, x: float) -> None:
        self.x = x

    def distance(self, other: _AtDistance) -> float:
        return abs(self.x - other.x)


def test_distance_only_inputs_use_the_exact_l2_loss() -> None:
    ev = PrivacyEvent("l2_laplace", "f", 1.0, 0.0, 2.0, "l2", 2.0)
    assert event_loss(ev, _AtDistance(0.0), _AtDistance(3.0)).epsilon_loss == pytest.approx(1.5)
    with pytest.raises(ValueError, match="ℓ2 mechanism"):
        event_loss(PrivacyEvent("laplace", "f", 1.0, 0.0, 2.0, "l1", 2.0), _AtDistance(0.0),
                   _AtDistance(1.0))


def cate_spec(workdir: Path, **section: Any) -> Path:
    doc = yaml.safe_load((workdir / "configs" / "cate.yaml").read_text())
    doc["cate"]["plot"] = False  # the PNG of every black-box release only costs time
    doc["cate"].update(section)
    return write_yaml(workdir / "cate_audit.yaml", doc)


def test_audit_passes_shipped_cate(workdir: Path) -> None:
    code, report, err = audit(cate_spec(workdir), "--rows", "200", "--pairs", "8", "--trials", "40")
    assert code == 0, err
    assert report["command"] == "cate" and report["verdict"] == "pass"
    g = report["gray_box"]
    assert set(g["max_loss_per_stage"]) == {"cate.nuisance.propensity", "cate.nuisance.outcome",
                                            "cate.second_stage.function"}
    assert 0.0 < g["max_sensitivity_ratio"] <= 1.0
    assert g["max_delta_at_claimed_epsilon"] <= 1e-5
    assert report["black_box"]["epsilon_lower_bound"] <= 5.0


def test_audit_passes_cate_rff(workdir: Path) -> None:
    code, report, err = audit(cate_spec(workdir, features="rff", rff_dim=40), "--rows", "120",
                              "--pairs", "4", "--trials", "0")
    assert code == 0, err
    assert report["gray_box"]["max_sensitivity_ratio"] <= 1.0


def test_cate_neighbours_stay_in_their_half(workdir: Path) -> None:
    from dpcausal.commands.cate import audit as cate_audit
    from dpcausal.commands.cate.spec import CateSpec

    spec = CateSpec.model_validate(yaml.safe_load(cate_spec(workdir).read_text()))
    rng = np.random.default_rng(1)
    frame = cate_audit.synthesize(spec, 80, rng)
    first, second = cate_audit.halves(spec, 80)
    seen = set()
    for name, d, dp in cate_audit.neighbours(spec, frame, rng, 8):
        base = frame if d is None else d
        diff = np.flatnonzero(~(base == dp).all(axis=1).to_numpy())
        assert len(diff) == 1 and len(dp) == 80, name
        seen.add("first" if diff[0] in set(first) else "second")
        assert name.startswith("first") == (diff[0] in set(first))
    assert seen == {"first", "second"} and len(first) + len(second) == 80


def test_audit_fails_cate_with_understated_rkhs_sensitivity(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpcausal.commands.cate.setup import CateSetup

    real = CateSetup.rkhs_sensitivity
    monkeypatch.setattr(CateSetup, "rkhs_sensitivity",
                        property(lambda self: real.fget(self) / 10))  # type: ignore[attr-defined]
    code, report, err = audit(cate_spec(workdir), "--rows", "200", "--pairs", "4", "--trials", "0")
    assert code == 4, err
    assert report["gray_box"]["max_loss_per_stage"]["cate.second_stage.function"] > 5.0


def test_audit_refuses_cate_queries_mode(workdir: Path) -> None:
    code, _, err = audit(cate_spec(workdir, mode="queries", loss="squared", grid=None,
                                   queries="sample_data/cate_queries.csv"),
                         "--rows", "200", "--pairs", "2")
    assert code == 2 and "asymptotic" in err, err


# ------------------------------------------------------------------ two-stage
def test_audit_passes_shipped_two_stage(workdir: Path) -> None:
    code, report, err = audit("configs/two_stage.yaml", "--rows", "100", "--pairs", "3",
                              "--trials", "20")
    assert code == 0, err
    assert report["command"] == "two-stage" and report["verdict"] == "pass"
    g = report["gray_box"]
    assert 0.0 < g["max_privacy_loss"] <= 1.0 and g["max_sensitivity_ratio"] <= 1.0


# The spec §2.7 [E] case: w ≡ 1, n = 4, p = 2, M_x = M_y = 1, λ₁ = 0.01, ε = 1 — a maximiser of
# the interior loss found by two_stage_audit.uniform_weight_search (cli_tests/statistical/
# test_two_stage_privacy.py): points r·(cos φ, sin φ) with r = σ(v₀), φ = v₁, t = 2·tanh(v₂).
N4_WITNESS = np.array([41.90947, 5.94093, -4.582001, 16.084259, -1.016443, 77.220404, 22.448115,
                       -0.476813, -0.794702, 9.877343, 0.214672, 40.011278, 49.756721, 2.977224,
                       15.336138, 44.051516, -0.037245, -10.127898])


def _witness_rows(records: list[int]) -> Any:
    import pandas as pd

    rows = []
    for i in records:
        v = N4_WITNESS[3 * i: 3 * i + 3]
        rows.append({"r": 1.0 / (1.0 + np.exp(-v[0])), "phi": float(np.remainder(v[1] + np.pi,
                                                                                 2 * np.pi) - np.pi),
                     "A": 1, "Y": float(np.tanh(v[2]))})  # treated: t = 2·Y
    return pd.DataFrame(rows)


@pytest.fixture
def unit_disc_witness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Test fixture: the paper's domain ‖x‖ ≤ 1 (the shipped maxabs map only reaches the inscribed
    square) via a polar feature map, and the audit's neighbours replaced by the witness pair."""
    from dpcausal.commands.common import linear_rule as owl_features
    from dpcausal.commands.two_stage import audit as two_stage_audit

    monkeypatch.chdir(tmp_path)
    def polar(x: Any) -> Any:
        return np.column_stack([x[:, 0] * np.cos(x[:, 1]), x[:, 0] * np.sin(x[:, 1])])

    monkeypatch.setattr(owl_features.FeatureMap, "_transform_linear",
                        lambda self, x, block=8192: polar(x))

    def clip_polar(self: Any, columns: Any, block: int = 8192) -> Any:  # two-stage's prepare
        clipped = np.clip(np.column_stack(columns), self.lower, self.upper)
        return clipped, polar(clipped)

    monkeypatch.setattr(owl_features.FeatureMap, "clip_transform_columns", clip_polar)
    d, dp = _witness_rows([0, 1, 2, 3]), _witness_rows([0, 1, 2, 4])
    real = two_stage_audit.ADAPTER
    monkeypatch.setattr(two_stage_audit, "ADAPTER", dataclasses.replace(
        real, synthesize=lambda spec, n, rng: d,
        neighbours=lambda spec, frame, rng, k: iter([("spec §2.7 [E] witness", d, dp)] * k)))

    def spec(calibration: str) -> Path:
        sec = {"treated": 1, "control": 0, "weights": "uniform", "sensitivity": "method",
               "calibration": calibration, "noise": "gamma", "eps_split": 0.5,
               "l1_radius": 0.01, "intercept": False, "scaling": "maxabs",
               "outcome_center": "midpoint"}  # the spec's stage-2 witness (public centre)
        if calibration == "paper":
            sec["allow_uncertified"] = True
        return write_yaml(tmp_path / f"two_stage_{calibration}.yaml", {
            "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": ["r", "phi"]}},
            "bounds": {"outcome": [-1.0, 1.0],
                       "covariates": {"r": [0.0, 1.0], "phi": [-np.pi, np.pi]}},
            "privacy": {"epsilon": 1.0}, "two_stage": sec})

    return spec


def test_audit_fails_two_stage_paper_calibration_on_the_1019_case(unit_disc_witness: Any) -> None:
    code, report, err = audit(unit_disc_witness("paper"), "--rows", "4", "--pairs", "1",
                              "--trials", "0")
    assert code == 4, err
    g = report["gray_box"]
    assert g["max_privacy_loss"] == pytest.approx(1.019, abs=2e-3)  # spec §2.7 [E]: ≈ 1.019 > ε
    # E1: the replaced record counts twice, so the gradient map moves ≈ 2× the paper's ζ·W₁
    assert g["max_sensitivity_ratio"] > 1.9


def test_audit_passes_two_stage_safe_calibration_on_the_1019_case(unit_disc_witness: Any) -> None:
    code, report, err = audit(unit_disc_witness("safe"), "--rows", "4", "--pairs", "1",
                              "--trials", "0")
    assert code == 0, err
    assert 0.5 < report["gray_box"]["max_privacy_loss"] < 0.53  # spec: safe ≈ 0.524 at this case
    assert report["gray_box"]["max_sensitivity_ratio"] <= 1.0


def test_audit_refuses_two_stage_gaussian(workdir: Path) -> None:
    doc = yaml.safe_load((workdir / "configs" / "two_stage.yaml").read_text())
    doc["two_stage"]["noise"] = "gaussian"
    doc["privacy"]["delta"] = 1e-6
    code, _, err = audit(write_yaml(workdir / "ts_gauss.yaml", doc), "--rows", "50", "--pairs", "1")
    assert code == 2 and "noise: gamma" in err, err


def test_select_policy_output_vector_reads_the_released_value() -> None:
    """The black box's view of a select-policy release: the one-hot choice, then the released value
    (its document is {estimate, interval, clamped}; the adapter read a former 'value' key)."""
    from dpcausal.commands.select_policy.audit import output_vector
    from dpcausal.method import Release

    doc = {"library": {"size": 3}, "selected": {"index": 1},
           "value_release": {"estimate": 2.5, "interval": {"lo": 2.0, "hi": 3.0}}}
    vec = output_vector(Release(documents={"selection.json": doc}))
    assert vec.tolist() == [0.0, 1.0, 0.0, 2.5]
