"""Issue 12: an ε so small that a noise scale leaves float64 is a spec error (exit 2), in the plan,
the dry run (also ``--json``) and the release of every command, and for every mechanism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cli_tests.helpers import invoke, write_yaml
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.errors import SpecError
from dpcausal.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    GaussianProcessMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
)
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector

COMMANDS = ("cate", "owl", "select_policy", "synth_control", "two_stage")
TOO_SMALL = "ε too small for float64"


def _example_with_epsilon(repo_root: Path, tmp_path: Path, config: str, epsilon: float) -> Path:
    doc = yaml.safe_load((repo_root / "configs" / f"{config}.yaml").read_text())
    doc["privacy"]["epsilon"] = epsilon
    return write_yaml(tmp_path / f"{config}.yaml", doc)


@pytest.mark.parametrize("config", COMMANDS)
@pytest.mark.parametrize("epsilon", [1.0e-320, 1.0e-100])
@pytest.mark.parametrize("mode", [["--dry-run"], ["--dry-run", "--json"], []],
                         ids=["dry-run", "dry-run-json", "release"])
def test_a_tiny_epsilon_is_a_spec_error_everywhere(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str,
        epsilon: float, mode: list[str]) -> None:
    # 1e-320 makes Δ/ε overflow to inf; 1e-100 leaves a finite scale whose square (synth-control's
    # error bound) overflowed: both were internal errors (exit 1) or inf in the printed plan
    spec = _example_with_epsilon(repo_root, tmp_path, config, epsilon)
    monkeypatch.chdir(repo_root)  # the example's data paths are relative to the repository
    out, ledger = tmp_path / "out", tmp_path / "ledger.jsonl"
    res = invoke([config.replace("_", "-"), "--spec", spec, "--out", out, "--ledger", ledger,
                  *mode])
    assert res.exit_code == 2, res.output
    assert TOO_SMALL in res.stderr and "privacy.epsilon" in res.stderr
    assert not out.exists() and not ledger.exists()
    if "--json" in mode:
        assert json.loads(res.stdout)["field"] == "privacy.epsilon"


def test_a_small_but_representable_epsilon_still_plans(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _example_with_epsilon(repo_root, tmp_path, "synth_control", 1e-30)
    monkeypatch.chdir(repo_root)
    res = invoke(["synth-control", "--spec", spec, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert all(e["noise_scale"] < 1e50 for e in json.loads(res.stdout)["events"])


@pytest.mark.parametrize("build", [
    lambda e: LaplaceMechanism(epsilon=e, l1_sensitivity=1.0),
    lambda e: L2LaplaceMechanism(epsilon=e, l2_sensitivity=1.0, dim=3),
    lambda e: ExponentialMechanism(epsilon=e, utility_sensitivity=1.0),
    lambda e: GaussianMechanism(epsilon=e, delta=1e-6, l2_sensitivity=1.0, calibration="classic"),
    lambda e: GaussianProcessMechanism(epsilon=e, delta=1e-6, rkhs_sensitivity=1.0,
                                       bandwidth=1.0),
    lambda e: GaussianNoiseVector(epsilon=e, delta=1e-6, l2_sensitivity=1.0,
                                      sigma=1.0 / e, dim=2),
    lambda e: PrivacyEvent(kind="laplace", stage="s", epsilon=e, delta=0.0, sensitivity=1.0,
                           norm="l1", noise_scale=1.0 / e),
], ids=["laplace", "l2_laplace", "exponential", "gaussian", "gaussian_process",
        "gaussian_vector", "event"])
def test_every_mechanism_refuses_when_built(build: object) -> None:
    # (an analytic Gaussian with δ > 0 keeps a finite σ as ε → 0, and is not refused for a
    # normal ε: only a scale that cannot be computed is)
    assert callable(build)
    build(0.5)  # an ordinary ε builds
    for epsilon in (1e-320, 1e-100):  # subnormal; a scale beyond MAX_NOISE_SCALE
        with pytest.raises(SpecError, match=TOO_SMALL):
            build(epsilon)


def test_a_huge_scale_at_an_ordinary_epsilon_names_the_units_too() -> None:
    """A noise scale beyond float64 at ε = 1 comes from the data's units (outcome bounds of 1e60),
    not from ε: the refusal says both; a tiny ε alone gets no units hint."""
    with pytest.raises(SpecError, match=TOO_SMALL) as err:
        LaplaceMechanism(1.0, 1e60, stage="cate.ate.estimate")
    assert "smaller units" in str(err.value) and err.value.field == "privacy.epsilon"
    with pytest.raises(SpecError, match=TOO_SMALL) as err:
        LaplaceMechanism(1e-320, 1.0, stage="cate.ate.estimate")
    assert "units" not in str(err.value)
