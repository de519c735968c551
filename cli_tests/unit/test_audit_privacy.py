"""audit privacy: exact losses, the black-box lower bound, and verdicts on sound and broken variants."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli_tests.helpers import invoke, write_yaml
from cli_tests.injected_bugs import bad_radius_noise, one_d_radius
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.audit.estimators import epsilon_lower_bound, event_loss
from dpcausal.commands.owl.setup import OwlSetup
from dpcausal.mechanisms import GaussianMechanism, L2LaplaceMechanism

REPO = Path(__file__).resolve().parents[2]


def _ev(kind: str, eps: float, sens: float, scale: float, delta: float = 0.0) -> PrivacyEvent:
    norm = {"laplace": "l1", "exponential": "utility"}.get(kind, "l2")
    return PrivacyEvent(kind, "s", eps, delta, sens, norm, scale)  # type: ignore[arg-type]


def test_exact_event_losses() -> None:
    a, b = np.array([0.0, 0.0]), np.array([3.0, 4.0])
    assert event_loss(_ev("l2_laplace", 1, 5, 5.0), a, b).epsilon_loss == pytest.approx(1.0)
    assert event_loss(_ev("laplace", 1, 7, 7.0), a, b).epsilon_loss == pytest.approx(1.0)
    ex = event_loss(_ev("exponential", 1, 1, 2.0), np.array([0.0, 1.0]), np.array([1.0, 0.0]))
    # p = softmax(u/2): the utilities swap, so each log-probability moves by exactly 1/2 (≤ ε = 1)
    assert ex.epsilon_loss == pytest.approx(0.5)
    g = GaussianMechanism(1.0, 1e-5, 1.0)
    at_sens = event_loss(_ev("gaussian", 1.0, 1.0, g.sigma, 1e-5), np.zeros(1), np.ones(1))
    assert at_sens.delta_at_claim == pytest.approx(1e-5, rel=1e-6)
    assert at_sens.epsilon_loss == pytest.approx(1.0, rel=1e-6)


@pytest.mark.statistical
def test_lower_bound_catches_a_wrong_radius_law_but_not_the_right_one() -> None:
    eps, sens, dim, n = 0.5, 1.0, 5, 4000
    mech = L2LaplaceMechanism(eps, sens, dim)
    c1, c2 = np.zeros(dim), np.r_[0.8 * sens, np.zeros(dim - 1)]
    rng = np.random.default_rng(0)
    bad = epsilon_lower_bound(np.array([c1 + bad_radius_noise(mech, rng) for _ in range(n)]),
                              np.array([c2 + bad_radius_noise(mech, rng) for _ in range(n)]),
                              rng=rng)
    assert bad.epsilon_lb > eps
    good = epsilon_lower_bound(np.array([mech.release(c1, rng=rng) for _ in range(n)]),
                               np.array([mech.release(c2, rng=rng) for _ in range(n)]), rng=rng)
    assert good.epsilon_lb <= eps


def test_gray_box_catches_understated_laplace_scale() -> None:
    # Per-entry Laplace at scale 2√m/ε instead of 2m/ε (the synth-control step-2 bug), m = 25:
    # one donor flipping from −1 to +1 moves the ℓ1 norm of its m post-period entries by 2m.
    eps, m = 1.0, 25
    a, b = np.zeros(m), np.full(m, 2.0)
    wrong = event_loss(_ev("laplace", eps, 2 * math.sqrt(m), 2 * math.sqrt(m) / eps), a, b)
    assert wrong.epsilon_loss == pytest.approx(5.0) and wrong.shift / wrong.sensitivity > 1
    right = event_loss(_ev("laplace", eps, 2 * m, 2 * m / eps), a, b)
    assert right.epsilon_loss == pytest.approx(eps)


def test_audit_passes_shipped_owl(small_owl_spec: Path) -> None:
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--rows", "40", "--pairs", "12",
                  "--trials", "150", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["verdict"] == "pass" and report["pairs_tried"] == 12
    assert 0.9 < report["gray_box"]["max_privacy_loss"] <= 1.0  # the planted pair attains the bound
    assert report["black_box"]["releases"] > 0


def test_audit_on_user_data(small_owl_spec: Path) -> None:
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--data", "sample_data/owl_trial.csv",
                  "--pairs", "4", "--trials", "0"])
    assert res.exit_code == 0, res.output
    assert "verdict: PASS" in res.stdout


def test_audit_fails_owl_with_understated_sensitivity(small_owl_spec: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = OwlSetup.sensitivity
    monkeypatch.setattr(OwlSetup, "sensitivity", lambda self, g, n: real(self, g, n) / 8)
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--rows", "10", "--pairs", "6",
                  "--trials", "0"])
    assert res.exit_code == 4, res.output
    assert "exceeds the claimed ε" in res.stderr


def test_audit_refuses_unknown_spec(tmp_path: Path) -> None:
    spec = write_yaml(tmp_path / "s.yaml", {"privacy": {"epsilon": 1}})
    res = invoke(["audit", "privacy", "--spec", spec])
    assert res.exit_code == 2 and "cannot tell which command" in res.stderr


@pytest.mark.slow
def test_audit_fails_owl_with_broken_sampler(small_owl_spec: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    one_d_radius(monkeypatch)
    doc = yaml.safe_load(small_owl_spec.read_text())
    doc["privacy"]["epsilon"] = 0.5
    write_yaml(small_owl_spec, doc)
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--rows", "8", "--pairs", "6",
                  "--trials", "3000", "--json"])
    assert res.exit_code == 4, res.output
    assert json.loads(res.stdout)["black_box"]["epsilon_lower_bound"] > 0.5


def test_audit_passes_shipped_synth_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "sample_data", tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    res = invoke(["audit", "privacy", "--spec", REPO / "configs" / "synth_control.yaml",
                  "--pairs", "6", "--trials", "0", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["command"] == "synth-control" and report["verdict"] == "pass"
    assert report["gray_box"]["max_sensitivity_ratio"] <= 1.0
