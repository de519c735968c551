"""cate (``features: rff``) on the engines (DESIGN §5): in memory, local streaming and a 2-worker
Dask LocalCluster give the same release (same test noise seed) whatever the partitioning; the exact
kernel path is refused on an engine; a failure mid-run publishes and charges nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import (
    count_engine_passes,
    invoke,
    read_json,
    releases,
    write_parts,
    write_yaml,
)
from cli_tests.unit.test_cate_method import dataset1

distributed = pytest.importorskip("distributed")

N_ROWS = 3_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cate_engine")
    frame = dataset1(N_ROWS, 21)
    csv = root / "t.csv"
    frame.to_csv(csv, index=False)
    return {"csv": csv, "one": write_parts(frame, root / "one", n_files=1, row_group=N_ROWS),
            "many": write_parts(frame, root / "many", n_files=4, row_group=250)}


def _spec(tmp: Path, data: Path, *, engine: dict[str, Any] | None = None, ledger: bool = False,
          **cate: Any) -> Path:
    doc: dict[str, Any] = {
        "data": {"path": str(data),
                 "columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": [-1.0, 9.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 3.0, "delta": 1e-6},
        "output": {"dir": str(tmp / "out")},
        # a seeded split: engine and memory releases are compared with the same test noise
        "cate": {"features": "rff", "rff_dim": 30, "bandwidth": 0.5, "plot": False,
                 "grid": {"vary": ["x0"], "points": 21, "fixed": {"x1": 0.5}},
                 "split": {"kind": "seeded", "seed": 0}, **cate},
    }
    if engine is not None:
        doc["engine"] = engine
    if ledger:
        doc["ledger"] = {"path": str(tmp / "ledger.jsonl"), "dataset": "d",
                         "budget": {"epsilon": 100.0, "delta": 1e-3}}
    return write_yaml(tmp / "spec.yaml", doc)


def _release(spec: Path, *extra: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    res = invoke(["cate", "--spec", spec, "--json", "--test-noise-seed", "7", *extra])
    assert res.exit_code == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    folder = Path(out["output_paths"][0]).parent
    weights = np.array(read_json(folder / "cate_function.json")["weights"])
    tau = pd.read_csv(folder / "cate.csv")["cate"].to_numpy()
    return weights, tau, out["summary"]


@pytest.mark.parametrize("learner", ["r", "dr"])
def test_engines_give_the_same_release_whatever_the_partitioning(
    tmp_path: Path, cluster: Any, data: dict[str, Path], learner: str,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = count_engine_passes(monkeypatch)
    w_ref, tau_ref, _ = _release(_spec(tmp_path, data["csv"], learner=learner))
    address = cluster.scheduler_address
    runs = {
        "local, csv": _release(_spec(tmp_path, data["csv"], learner=learner,
                                     engine={"kind": "local", "batch_rows": 1000})),
        "local, 1 file": _release(_spec(tmp_path, data["one"], learner=learner),
                                  "--engine", "local"),
        "local, 4 files, no cache": _release(_spec(
            tmp_path, data["many"], learner=learner,
            engine={"kind": "local", "batch_rows": 1000, "cache_mb": 0})),
        "dask, 1 partition": _release(_spec(tmp_path, data["one"], learner=learner),
                                      "--engine-address", address),
        "dask, 4 partitions": _release(_spec(
            tmp_path, data["many"], learner=learner,
            engine={"kind": "dask", "batch_rows": 1000, "address": address})),
    }
    for name, (w, tau, summary) in runs.items():
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-8, err_msg=name)
        np.testing.assert_allclose(tau, tau_ref, rtol=0, atol=1e-8, err_msg=name)
        assert summary["learner"] == learner
        # the pass and iteration counts follow the data: never published
        assert not {"data_passes", "second_stage_newton_iterations"} & set(summary), name
    assert len(passes) == len(runs) and min(passes) >= 4  # nuisance passes + second-stage passes
    receipt = read_json(tmp_path / "out" / "receipt.json")
    assert set(receipt["engine"]) == {"kind", "description"}
    assert "4 partitions" in runs["dask, 4 partitions"][2]["engine"]


def test_exact_features_are_refused_on_an_engine(tmp_path: Path, data: dict[str, Path]) -> None:
    for extra in (["--dry-run"], []):
        res = invoke(["cate", "--spec", _spec(tmp_path, data["many"], features="exact"),
                      "--engine", "local", *extra])
        assert res.exit_code == 2, res.stdout + res.stderr
        assert "cate.features" in res.stderr and "rff" in res.stderr
        assert not (tmp_path / "out" / "receipt.json").exists()


def test_worker_failure_mid_run_leaves_no_receipt_and_no_ledger_entry(
    tmp_path: Path, cluster: Any, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcausal.commands.cate.rff as ecr

    spec = _spec(tmp_path, data["many"], ledger=True,
                 engine={"kind": "dask", "address": cluster.scheduler_address,
                         "batch_rows": 1000})
    real = ecr.rff_pass

    def flaky(part: Any, start: int, **kw: Any) -> Any:  # runs on a worker
        if kw["step"] is not None and start > 0:  # the first Newton step of the second stage
            raise distributed.comm.core.CommClosedError("worker lost")  # a cluster failure: exit 5
        return real(part, start, **kw)

    monkeypatch.setattr(ecr, "rff_pass", flaky)
    res = invoke(["cate", "--spec", spec, "--test-noise-seed", "1"])
    assert res.exit_code == 5, res.stdout + res.stderr
    assert "Dask engine failed mid-run" in res.stderr
    for name in ("receipt.json", "cate.csv", "cate_function.json"):
        assert not (tmp_path / "out" / name).exists()
    ledger = tmp_path / "ledger.jsonl"
    assert not ledger.exists() or ledger.read_text().strip() == ""
    monkeypatch.setattr(ecr, "rff_pass", real)
    ok = invoke(["cate", "--spec", spec, "--test-noise-seed", "1"])  # the same run, healthy
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert len(releases(ledger)) == 1
    assert read_json(tmp_path / "out" / "receipt.json")["engine"]["kind"] == "dask"


def test_dry_run_with_an_engine_reads_no_row(tmp_path: Path, data: dict[str, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import dpcausal.engine.base as base
    import dpcausal.engine.local as local
    from dpcausal.io import tables

    def no_read(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a dry run read rows")

    for mod, name in ((base, "iter_piece"), (local, "iter_piece"), (tables, "read_table")):
        monkeypatch.setattr(mod, name, no_read)
    for extra in (["--engine", "local"], ["--engine-address", "tcp://127.0.0.1:1"]):
        res = invoke(["cate", "--spec", _spec(tmp_path, data["many"]), "--dry-run", "--json",
                      *extra])
        assert res.exit_code == 0, res.stdout + res.stderr
        plan = json.loads(res.stdout)
        assert plan["n_rows"] == N_ROWS and plan["details"]["n_second_half"] == N_ROWS // 2


def test_bad_treatment_value_is_a_data_error_naming_its_batch(tmp_path: Path) -> None:
    frame = dataset1(N_ROWS, 22)
    frame.loc[2_345, "A"] = 2.0  # global data row 2346 (row 346 of the batch from row 2001)
    parts = write_parts(frame, tmp_path / "p", n_files=3, row_group=400)
    res = invoke(["cate", "--spec", _spec(tmp_path, parts), "--engine", "local"])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "'A'" in res.stderr and "data row 2346" in res.stderr  # the global row number
    # counted over the whole file (every batch adds its count), not per batch
    assert "column 'A' has 1 value(s) that are neither the treated value 1" in res.stderr
    assert not (tmp_path / "out" / "receipt.json").exists()


@pytest.mark.slow
def test_a_worker_process_that_dies_mid_run_is_replaced_and_the_release_is_unchanged(
    tmp_path: Path, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker death (os._exit in a worker process during a second-stage Newton pass): the
    scheduler recomputes the lost partitions (read, clip, ρ and φ from the released nuisances) on
    the surviving worker; the passes keep no per-row state, so the release equals the in-memory
    one."""
    import os

    import dpcausal.commands.cate.rff as ecr

    w_ref, tau_ref, _ = _release(_spec(tmp_path, data["many"]))
    marker = tmp_path / "died"
    real = ecr.rff_pass

    def dies_once(part: Any, start: int, **kw: Any) -> Any:  # pickled by value to the worker
        if kw["step"] is not None and start > 0 and not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return real(part, start, **kw)

    monkeypatch.setattr(ecr, "rff_pass", dies_once)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as lc:
        w, tau, _ = _release(_spec(tmp_path, data["many"], engine={
            "kind": "dask", "batch_rows": 1000, "address": lc.scheduler_address}))
    assert marker.exists()
    np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-8)
    np.testing.assert_allclose(tau, tau_ref, rtol=0, atol=1e-8)
