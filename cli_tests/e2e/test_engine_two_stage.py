"""two-stage on the engines (DESIGN §5, issue #6): in-memory, local streaming (one file or several,
cached or not) and a 2-worker Dask LocalCluster give the same released θ (same test noise seed) for
every weight method with an engine path; mmd is refused on an engine; a failure mid-run publishes
and charges nothing; a dry run reads no row."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import special

from cli_tests.helpers import (
    count_engine_passes,
    invoke,
    read_json,
    releases,
    write_parts,
    write_yaml,
)
from dpcausal.commands.two_stage.method import METHOD
from dpcausal.commands.two_stage.setup import build_setup, data_columns, prepare
from dpcausal.commands.two_stage.stage1 import _moments

distributed = pytest.importorskip("distributed")

N_ROWS = 3_000
COVS = ["x1", "x2", "x3", "x4"]


def _frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    """Confounded observational rows: P(A = 1 | x) = expit(0.8 x1 − 0.6 x2)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, 4))
    a = (rng.uniform(size=n) < special.expit(0.8 * x[:, 0] - 0.6 * x[:, 1])).astype(int)
    y = x[:, 0] + (2 * a - 1) * (1.5 * x[:, 2] - 0.5 * x[:, 3] + 0.3) + rng.normal(0.0, 1.0, n)
    frame = pd.DataFrame(x, columns=COVS)
    frame["A"], frame["Y"], frame["unused"] = a, y, rng.normal(size=n)
    return frame


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("two_stage_engine")
    frame = _frame()
    csv = root / "obs.csv"
    frame.to_csv(csv, index=False)
    new = root / "new.csv"
    _frame(n=50, seed=9)[COVS].to_csv(new, index=False)
    return {"csv": csv, "one": write_parts(frame, root / "one", 1, 3_000),
            "four": write_parts(frame, root / "four", 4, 400), "new": new}


WEIGHTS: dict[str, dict[str, Any]] = {
    "uniform": {"weights": "uniform"},
    "ipw-rct": {"weights": "ipw-rct", "ipw_rct": {"p_treated": 0.45}},
    "ipw-known": {"weights": "ipw-known",
                  "ipw_known": {"intercept": 0.1, "coefficients": {"x1": 0.7, "x2": -0.5}}},
    "ipw-logit": {"weights": "ipw-logit", "ipw_logit": {"radius": 3.0, "ridge": 0.05}},
    "ipw-logit-universal": {"weights": "ipw-logit", "sensitivity": "universal",
                            "ipw_logit": {"radius": 3.0, "ridge": 0.05}},
    # a small radius: the ℓ₂-ball constraint of the stage-1 dual is active (bisection on μ)
    "ipw-logit-ball": {"weights": "ipw-logit", "ipw_logit": {"radius": 0.05, "ridge": 0.1}},
    "ebw": {"weights": "ebw", "ebw": {"radius": 2.0, "ridge": 0.1, "arm_totals": "sample"}},
    "ebw-universal-equal": {"weights": "ebw", "sensitivity": "universal",
                            "ebw": {"radius": 2.0, "ridge": 0.1, "arm_totals": "equal",
                                    "moments": 2}},
    "ebw-ball": {"weights": "ebw", "ebw": {"radius": 0.005, "ridge": 0.5,
                                           "arm_totals": "sample", "moments": 2}},
}
MMD = {"weights": "mmd", "sensitivity": "universal", "mmd": {"bandwidth": 1.0}}
BALL_ACTIVE = {"ipw-logit-ball", "ebw-ball"}


def _spec(tmp: Path, data: Path, weights: str, *, engine: dict[str, Any] | None = None,
          ledger: bool = False, **extra: Any) -> Path:
    doc: dict[str, Any] = {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": COVS}},
        "bounds": {"outcome": [-6.0, 6.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": 50.0},
        "output": {"dir": str(tmp / "out")},
        "two_stage": {"treated": 1, "control": 0, "l1_radius": 50.0,
                      **copy.deepcopy(MMD if weights == "mmd" else WEIGHTS[weights]), **extra},
    }
    if engine is not None:
        doc["engine"] = engine
    if ledger:
        doc["ledger"] = {"path": str(tmp / "ledger.jsonl"), "dataset": "d",
                         "budget": {"epsilon": 1000.0}}
    return write_yaml(tmp / "spec.yaml", doc)


def _run(spec: Path, *extra: Any) -> tuple[np.ndarray, dict[str, Any]]:
    res = invoke(["two-stage", "--spec", spec, "--json", "--test-noise-seed", "11", *extra])
    assert res.exit_code == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    rule = read_json(Path(out["output_paths"][0]).parent / "rule.json")
    return np.array(rule["theta"]), out["summary"]


@pytest.mark.parametrize("weights", list(WEIGHTS))
def test_engines_give_the_same_release_whatever_the_partitioning(
    tmp_path: Path, data: dict[str, Path], cluster: Any, weights: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dpcausal.commands.two_stage import weights as wts

    real, norms = wts.solve_dual, []

    def spy(fun: Any, d: int, radius: float, *args: Any, **kw: Any) -> np.ndarray:
        lam = real(fun, d, radius, *args, **kw)
        norms.append(float(np.linalg.norm(lam)) / radius)
        return lam

    monkeypatch.setattr(wts, "solve_dual", spy)
    passes = count_engine_passes(monkeypatch)
    reference, _ = _run(_spec(tmp_path, data["csv"], weights))
    assert np.count_nonzero(reference) == len(reference)
    assert float(np.abs(reference).sum()) < 50.0  # the stage-2 ℓ₁ ball is not active either
    local = {"kind": "local", "batch_rows": 1000}
    runs = {
        "local, csv": _run(_spec(tmp_path, data["csv"], weights, engine=local)),
        "local, 1 file": _run(_spec(tmp_path, data["one"], weights), "--engine", "local"),
        "local, 4 files": _run(_spec(tmp_path, data["four"], weights, engine=local)),
        "local, 4 files, no cache": _run(_spec(tmp_path, data["four"], weights,
                                               engine={**local, "cache_mb": 0})),
        "dask, 8 partitions": _run(_spec(tmp_path, data["four"], weights, engine={
            "kind": "dask", "batch_rows": 1000, "address": cluster.scheduler_address})),
    }
    assert len(passes) == len(runs) and min(passes) >= 1
    for name, (theta, summary) in runs.items():
        np.testing.assert_allclose(theta, reference, rtol=0, atol=1e-9, err_msg=name)
        assert "data_passes" not in summary  # data-dependent: never published
        assert summary["engine"].startswith("dask" if "dask" in name else "local")
    if weights in BALL_ACTIVE:  # in memory and on every engine, λ ended on the sphere
        assert len(norms) == 1 + len(runs)
        assert min(norms) > 1.0 - 1e-6
        assert passes[list(runs).index("local, 4 files")] > 15  # the bisection ran on the engine
    elif weights.startswith(("ipw-logit", "ebw")):
        assert max(norms) < 1.0


def test_recommendations_and_receipt_on_the_engines(tmp_path: Path, data: dict[str, Path],
                                                    cluster: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    passes = count_engine_passes(monkeypatch)
    spec = _spec(tmp_path, data["four"], "ipw-known", apply_to=str(data["new"]))
    recs, receipts = {}, {}
    for name, extra in (("memory", []), ("local", ["--engine", "local"]),
                        ("dask", ["--engine-address", cluster.scheduler_address])):
        _run(spec, *extra)
        recs[name] = pd.read_csv(tmp_path / "out" / "recommendations.csv")
        receipts[name] = read_json(tmp_path / "out" / "receipt.json")
    pd.testing.assert_frame_equal(recs["local"], recs["memory"])
    pd.testing.assert_frame_equal(recs["dask"], recs["memory"])
    assert "engine" not in receipts["memory"]
    assert receipts["dask"]["engine"]["kind"] == "dask"
    assert passes[0] == 2  # ipw-known: the private centre's Σy pass and one stage-2 pass
    assert set(receipts["local"]["engine"]) == {"kind", "description"}  # no pass count
    for name in ("memory", "local", "dask"):
        assert receipts[name]["events"] == receipts["memory"]["events"]


def test_mmd_on_an_engine_is_refused_before_any_row_is_read(
    tmp_path: Path, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcausal.engine.base as base
    from dpcausal.io import tables

    def no_read(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a row was read")

    monkeypatch.setattr(tables, "read_table", no_read)
    monkeypatch.setattr(base, "iter_piece", no_read)
    spec = _spec(tmp_path, data["four"], "mmd", ledger=True)
    for extra in (["--engine", "local"], ["--engine", "dask", "--engine-address",
                                           "tcp://127.0.0.1:1"], ["--engine", "local",
                                                                   "--dry-run"]):
        res = invoke(["two-stage", "--spec", spec, *extra])
        assert res.exit_code == 2, res.stdout + res.stderr
        assert "two_stage.weights: mmd has no engine path" in res.stderr
        assert "remove the spec's engine section" in res.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "ledger.jsonl").exists()


@pytest.mark.parametrize("stat", ["logit_pass", "stage2_pass"])
def test_worker_failure_mid_run_leaves_no_receipt_and_no_ledger_entry(
    tmp_path: Path, data: dict[str, Path], cluster: Any, monkeypatch: pytest.MonkeyPatch,
    stat: str,
) -> None:
    import dpcausal.commands.two_stage.engine as engine_two_stage

    spec = _spec(tmp_path, data["four"], "ipw-logit", ledger=True,
                 engine={"kind": "dask", "address": cluster.scheduler_address,
                         "batch_rows": 1000})
    real = getattr(engine_two_stage, stat)

    def flaky(part: Any, start: int, **kw: Any) -> Any:  # runs on a worker (a pickled copy)
        # a later partition fails after earlier passes succeeded: in a stage-1 pass away from
        # λ = 0 (the solver's first pass), or in the stage-2 pass after the whole of stage 1
        if start > 0 and np.any(kw["lam"] != 0.0):
            raise distributed.comm.core.CommClosedError("worker lost")  # a cluster failure: exit 5
        return real(part, start, **kw)

    monkeypatch.setattr(engine_two_stage, stat, flaky)
    res = invoke(["two-stage", "--spec", spec, "--test-noise-seed", "1"])
    assert res.exit_code == 5, res.stdout + res.stderr
    assert "Dask engine failed mid-run" in res.stderr
    assert not (tmp_path / "out" / "receipt.json").exists()
    assert not (tmp_path / "out" / "rule.json").exists()
    ledger = tmp_path / "ledger.jsonl"
    assert not ledger.exists() or ledger.read_text().strip() == ""
    monkeypatch.setattr(engine_two_stage, stat, real)
    ok = invoke(["two-stage", "--spec", spec, "--test-noise-seed", "1"])  # healthy again
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert len(releases(ledger)) == 1


def test_bad_value_is_a_data_error_with_its_global_row(tmp_path: Path, cluster: Any) -> None:
    frame = _frame()
    frame.loc[2_500, "x3"] = np.nan
    parts = write_parts(frame, tmp_path / "p", n_files=2, row_group=500)
    for extra in (["--engine", "local"], ["--engine-address", cluster.scheduler_address]):
        res = invoke(["two-stage", "--spec", _spec(tmp_path, parts, "ipw-logit"), *extra])
        assert res.exit_code == 2, res.stdout + res.stderr
        assert "'x3'" in res.stderr
        assert "first at data row 2501" in res.stderr
        assert not (tmp_path / "out" / "receipt.json").exists()


def test_dry_run_with_an_engine_reads_no_row(
    tmp_path: Path, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcausal.engine.base as base
    from dpcausal.io import tables

    def no_read(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a row was read")

    monkeypatch.setattr(tables, "read_table", no_read)
    monkeypatch.setattr(base, "iter_piece", no_read)
    for extra in (["--engine", "local"], ["--engine-address", "tcp://127.0.0.1:1"]):
        res = invoke(["two-stage", "--spec", _spec(tmp_path, data["four"], "ebw"), "--dry-run",
                      "--json", *extra])
        assert res.exit_code == 0, res.stdout + res.stderr
        assert json.loads(res.stdout)["n_rows"] == N_ROWS
    assert not (tmp_path / "out" / "receipt.json").exists()


@pytest.mark.parametrize("weights", ["ipw-logit", "ebw-universal-equal"])
def test_stage1_passes_match_the_in_memory_objective_within_the_rounding_allowance(
    tmp_path: Path, data: dict[str, Path], weights: str
) -> None:
    """The engine's value/gradient/Hessian (odd-sized batches, summed on the client) equal the
    in-memory ones up to summation order: far inside the certificate's allowance ε_g."""
    import functools
    import math

    from dpcausal.commands.two_stage import dual
    from dpcausal.commands.two_stage import engine as eng
    from dpcausal.commands.two_stage import weights as wts
    from dpcausal.engine.local import LocalEngine
    from dpcausal.io import tables
    from dpcausal.spec.load import load_spec

    spec, _ = load_spec(_spec(tmp_path, data["four"], weights), METHOD.spec_model)
    setup = build_setup(spec)
    info = tables.inspect_table(data["four"])
    engine = LocalEngine(info, data_columns(spec), batch_rows=137, cache_mb=0)
    engine.load(functools.partial(eng.prepare_batch, spec, setup))
    fun_e, d, radius, ridge, _ = eng.stage1_objective(spec, setup, engine, N_ROWS)
    prep = prepare(spec, setup, tables.read_table(data["four"], data_columns(spec)), None)
    if weights == "ipw-logit":
        feats = np.hstack([np.ones((N_ROWS, 1)), prep.scaled])
        fun_m = wts.logit_objective(
            lambda lam: wts.logit_sums(feats, prep.a.astype(float), lam), N_ROWS, d, ridge)
    else:
        g, m_g = _moments(prep.scaled, 2)
        rows = wts.ebw_rows(prep.a, g, 0.1, m_g)
        target = wts.ebw_target(g.mean(axis=0), 0.1, m_g)
        fun_m = wts.ebw_objective(lambda lam: wts.ebw_sums(rows, lam), N_ROWS, d, target, ridge)
    eps_g = dual.gradient_rounding_allowance(N_ROWS, d, radius, ridge)
    rng = np.random.default_rng(4)
    for scale in (0.0, 0.3, 1.0, 40.0):  # 40R: a Newton iterate far outside the ball (ebw: stable)
        lam = rng.normal(size=d)
        lam *= scale * radius / float(np.linalg.norm(lam))
        (ve, ge, he), (vm, gm, hm) = fun_e(lam, 0.0), fun_m(lam, 0.0)
        assert math.isfinite(ve)
        assert abs(ve - vm) <= 1e-12 * max(1.0, abs(vm))
        assert float(np.linalg.norm(ge - gm)) <= (eps_g if scale <= 1.0 else 1e-9)
        np.testing.assert_allclose(he, hm, rtol=1e-10, atol=1e-13)
    assert engine.passes >= 4


@pytest.mark.parametrize("weights", ["ipw-logit", "ebw-universal-equal"])
@pytest.mark.parametrize(("intercept", "scaling"), [(True, "maxabs"), (False, "minmax")])
def test_stage2_features_recomputed_from_the_stage1_input_are_bitwise_the_feature_map(
    tmp_path: Path, data: dict[str, Path], weights: str, intercept: bool, scaling: str
) -> None:
    from dpcausal.commands.two_stage import engine as eng
    from dpcausal.spec.load import load_spec

    spec, _ = load_spec(_spec(tmp_path, data["csv"], weights, intercept=intercept,
                              scaling=scaling), METHOD.spec_model)
    setup = build_setup(spec)
    frame = _frame(n=500, seed=3)
    frame.loc[:5, "x2"] = 7.0  # clipped
    part = eng.prepare_batch(spec, setup, frame, 0)
    assert part[0] is None  # one copy of the covariates per cached batch
    expected = setup.fmap.transform(frame[COVS].to_numpy())
    assert np.array_equal(eng.features(part), expected)


@pytest.mark.slow
def test_a_worker_process_that_dies_mid_run_is_replaced_and_the_release_is_unchanged(
    tmp_path: Path, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker death (os._exit in a worker process during a stage-1 ebw pass): the
    scheduler recomputes the lost partitions and the release equals the in-memory one."""
    import os

    import dpcausal.commands.two_stage.engine as engine_two_stage

    reference, _ = _run(_spec(tmp_path, data["csv"], "ebw"))
    marker = tmp_path / "died"
    real = engine_two_stage.ebw_pass

    def dies_once(part: Any, start: int, **kw: Any) -> Any:  # pickled by value to the worker
        if start > 0 and np.any(kw["lam"] != 0.0) and not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return real(part, start, **kw)

    monkeypatch.setattr(engine_two_stage, "ebw_pass", dies_once)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as lc:
        theta, _ = _run(_spec(tmp_path, data["four"], "ebw", engine={
            "kind": "dask", "batch_rows": 1000, "address": lc.scheduler_address}))
    assert marker.exists()
    np.testing.assert_allclose(theta, reference, rtol=0, atol=1e-9)
