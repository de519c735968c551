"""Issue 16 for cate's τ(x) release, through the real CLI on the shipped example: the printed noise
interval of every grid point covers the noise at its rate (2,000 seeded draws of the release's own
Gaussian-process mechanism at the release's input, three arms: the printed scale within 1.5 points
of 1 − α, 0.7x and 1.3x outside), the dry run predicts it, clamping is recorded, and the guard
refuses before reading any row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import dpcausal.pipeline as pipeline
from cli_tests.helpers import assert_coverage_three_arm, coverage_three_arm, invoke, write_yaml
from dpcausal.audit.blackbox import RecordingGuard
from dpcausal.mechanisms import NoiseGuard

ALPHA = 0.05
DRAWS = 2000


def test_cate_intervals_cover_at_their_rate(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guards: list[RecordingGuard] = []

    def make(plan: Any, *, test_seed: int | None = None) -> NoiseGuard:
        assert test_seed is not None
        guards.append(RecordingGuard(plan, test_seed=test_seed))
        return guards[-1]

    monkeypatch.setattr(pipeline, "NoiseGuard", make)
    res = invoke(["cate", "--spec", "configs/cate.yaml", "--test-noise-seed", "5", "--json"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(workdir / "out" / "cate" / "cate.csv")
    draw = guards[0].draws["cate.second_stage.function"]
    g_hat = np.asarray(draw.value)
    noise = draw.resample(DRAWS, test_seed=13) - g_hat
    # away from the clamp, the printed interval is the released value ± h
    inside = ~table["cate_clamped"].to_numpy()
    assert inside.all()
    half = (table["cate_noise_hi"] - table["cate"]).to_numpy()
    assert np.allclose(half, table["cate"] - table["cate_noise_lo"])
    assert np.allclose(half, half[0])  # unit-diagonal kernel: one sd at every point
    cov = coverage_three_arm(np.abs(noise), lambda f: f * half)
    assert_coverage_three_arm(cov, ALPHA)
    summary = json.loads(res.stdout)["summary"]
    assert summary["cate_noise_interval"]["halfwidth"] == pytest.approx(half[0])
    plan = json.loads(invoke(["cate", "--spec", "configs/cate.yaml", "--dry-run",
                              "--json"]).stdout)
    head = plan["accuracy"][0]
    assert (head["quantity"], head["headline"], head["bound"]) == ("cate", True, False)
    assert head["halfwidth"] == pytest.approx(half[0])


def test_cate_clamps_and_the_plot_names_the_fixed_covariates(workdir: Path) -> None:
    doc = yaml.safe_load((workdir / "configs" / "cate.yaml").read_text())
    doc["privacy"]["epsilon"] = 0.05  # mostly noise: values beyond ±(outcome range) get clamped
    doc["cate"]["ridge"] = 0.0258  # the old 1/√n (the total-error rule would shrink instead)
    doc.pop("ledger")
    path = write_yaml(workdir / "noisy.yaml", doc)
    res = invoke(["cate", "--spec", path, "--test-noise-seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(workdir / "out" / "cate" / "cate.csv")
    dy = doc["bounds"]["outcome"][1] - doc["bounds"]["outcome"][0]
    assert (table["cate"].abs() <= dy).all()
    moved = table["cate_clamped"].to_numpy()
    assert moved.any()
    assert np.allclose(table.loc[moved, "cate"].abs(), dy)
    assert json.loads(res.stdout)["summary"]["clamped"] == int(moved.sum())
    # the band's interval is intersected with the range, never shifted off the value
    assert (table["cate_noise_lo"] >= -dy).all() and (table["cate_noise_hi"] <= dy).all()


def test_cate_guard_refuses_before_reading_rows(workdir: Path) -> None:
    head = json.loads(invoke(["cate", "--spec", "configs/cate.yaml", "--dry-run",
                              "--json"]).stdout)["accuracy"][0]
    data = workdir / "sample_data" / "cate_obs.csv"
    lines = data.read_text().splitlines()
    lines[3] = ",".join(["oops", *lines[3].split(",")[1:]])
    data.write_text("\n".join(lines) + "\n")
    doc = yaml.safe_load((workdir / "configs" / "cate.yaml").read_text())
    doc["accuracy"] = {"max_halfwidth": head["halfwidth"] / 2}
    path = write_yaml(workdir / "limited.yaml", doc)
    res = invoke(["cate", "--spec", path])
    assert res.exit_code == 3, res.output
    assert "No row was read" in res.stderr
    assert not (workdir / "out" / "cate").exists()
