"""A refusal is an output (issue #13, findings 1 and 2): once the rows are read, whether a run exits 0
must not depend on them. Neighbouring data sets (one row replaced) at public settings that used to
flip the exit code — the mmd program's arm-size feasibility, ridge/logistic gradient checks at
extreme outcome ranges and penalties — now give the same exit code, and no message quotes a
data-dependent number."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import invoke, write_yaml


def run_pair(tmp_path: Path, command: str, doc: dict[str, Any], frames: list[pd.DataFrame],
             extra: tuple[str, ...] = ()) -> list[Any]:
    """Run ``command`` on each frame (same spec, own data file and output dir); the results."""
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


def _mmd_doc() -> dict[str, Any]:
    return {
        "data": {"path": "unused.csv",
                 "columns": {"outcome": "y", "treatment": "a", "covariates": ["x1", "x2", "x3"]}},
        "bounds": {"outcome": [-5.0, 5.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": "unused"},
        "two_stage": {"treated": 1, "control": 0, "weights": "mmd", "sensitivity": "universal",
                      "mmd": {"bandwidth": 1.0, "box": 5.0}, "l1_radius": 5.0},
    }


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
    from dpcausal.errors import SolverError
    from dpcausal.methods import two_stage as ts
    from dpcausal.methods import two_stage_weights as wts
    from dpcausal.spec.two_stage import TwoStageSpec

    spec = TwoStageSpec.model_validate(_mmd_doc())
    setup = ts.build_setup(spec)
    data = ts.prepare(spec, setup, _two_stage_frame(60, 30, seed=2), None)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise SolverError("did not converge")

    monkeypatch.setattr(wts, "mmd_weights", fail)
    np.testing.assert_array_equal(ts.compute_weights(spec, setup, data), np.ones(60))
    monkeypatch.setattr(wts, "mmd_weights", lambda *a, **k: np.full(60, np.nan))
    np.testing.assert_array_equal(ts.compute_weights(spec, setup, data), np.ones(60))
