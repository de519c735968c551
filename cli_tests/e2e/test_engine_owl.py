"""owl on the engines (DESIGN §5): in-memory, local streaming and a 2-worker Dask LocalCluster give
the same release (same test noise seed) whatever the partitioning; a failure mid-run publishes and
charges nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import invoke, read_json, releases, write_parts, write_yaml
from dpcausal.solvers import erm

distributed = pytest.importorskip("distributed")

N_ROWS = 3_000


def _frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (n, 4))
    a = rng.integers(0, 2, n)
    b = x[:, 0] - x[:, 1] + (2 * a - 1) * (x[:, 2] - 0.5) * 3 + rng.normal(0.0, 1.0, n)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "x4": x[:, 3],
                         "A": a, "B": b, "unused": rng.normal(size=n)})


def _spec(tmp: Path, data: Path, *, engine: dict[str, Any] | None = None,
          ledger: bool = False, **owl: Any) -> Path:
    doc: dict[str, Any] = {
        "data": {"path": str(data), "columns": {"outcome": "B", "treatment": "A",
                                               "covariates": ["x1", "x2", "x3", "x4"]}},
        "bounds": {"outcome": [-6.0, 6.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 5.0},
        "output": {"dir": str(tmp / "out")},
        "owl": {"treated": 1, "propensity": 0.5, "gamma": 20.0, **owl},
    }
    if engine is not None:
        doc["engine"] = engine
    if ledger:
        doc["ledger"] = {"path": str(tmp / "ledger.jsonl"), "dataset": "d",
                         "budget": {"epsilon": 100.0}}
    return write_yaml(tmp / "spec.yaml", doc)


def _theta(spec: Path, *extra: Any) -> np.ndarray:
    res = invoke(["owl", "--spec", spec, "--json", "--test-noise-seed", "11", *extra])
    assert res.exit_code == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    return np.array(read_json(Path(out["output_paths"][0]).parent / "rule.json")["theta"])


@pytest.mark.parametrize("kernel", ["linear", "rff"])
def test_engines_give_the_same_release_whatever_the_partitioning(
    tmp_path: Path, cluster: Any, kernel: str
) -> None:
    frame = _frame()
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    owl = {"kernel": kernel, **({"rff": {"dim": 8, "bandwidth": 1.0, "seed": 3}}
                                if kernel == "rff" else {})}
    reference = _theta(_spec(tmp_path, csv, **owl))
    parts_a = write_parts(frame, tmp_path / "a", n_files=1, row_group=3_000)
    parts_b = write_parts(frame, tmp_path / "b", n_files=4, row_group=400)
    runs = {
        "memory, directory": _theta(_spec(tmp_path, parts_b, **owl)),
        "local, csv": _theta(_spec(tmp_path, csv, engine={"kind": "local", "batch_rows": 1000},
                                   **owl)),
        "local, 1 file": _theta(_spec(tmp_path, parts_a, **owl), "--engine", "local"),
        "local, 4 files": _theta(_spec(tmp_path, parts_b, engine={"kind": "local",
                                                                    "batch_rows": 1000}, **owl)),
        "local, no cache": _theta(_spec(tmp_path, parts_b, engine={
            "kind": "local", "batch_rows": 1000, "cache_mb": 0}, **owl)),
        "dask, 1 partition": _theta(_spec(tmp_path, parts_a, **owl),
                                    "--engine-address", cluster.scheduler_address),
        "dask, 8 partitions": _theta(
            _spec(tmp_path, parts_b, engine={"kind": "dask", "batch_rows": 1000,
                                             "address": cluster.scheduler_address}, **owl)),
    }
    for name, theta in runs.items():
        np.testing.assert_allclose(theta, reference, rtol=0, atol=1e-9, err_msg=name)


def test_the_receipt_records_where_the_data_passes_ran(tmp_path: Path, cluster: Any) -> None:
    frame = _frame()
    parts = write_parts(frame, tmp_path / "p", n_files=2, row_group=500)
    spec = _spec(tmp_path, parts)
    receipts = {}
    for name, extra in (("memory", []), ("local", ["--engine", "local"]),
                        ("dask", ["--engine-address", cluster.scheduler_address])):
        res = invoke(["owl", "--spec", spec, "--json", *extra])
        assert res.exit_code == 0, res.stdout + res.stderr
        receipts[name] = read_json(tmp_path / "out" / "receipt.json")
    assert "engine" not in receipts["memory"]
    assert receipts["local"]["engine"]["kind"] == "local"
    assert receipts["dask"]["engine"]["kind"] == "dask"
    assert "2 workers" in receipts["dask"]["engine"]["description"]
    for name in ("local", "dask"):
        # the pass count follows the solver's data-dependent iterations: never published
        assert set(receipts[name]["engine"]) == {"kind", "description"}
        assert receipts[name]["dp_guarantee"] is True
    ver = invoke(["audit", "verify", "--receipt", tmp_path / "out" / "receipt.json"])
    assert ver.exit_code == 0, ver.stdout + ver.stderr


def test_warm_start_uses_the_same_public_rows_on_every_engine(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The large-n warm start subsamples by global row index, so partitions cannot change it."""
    from dpcausal.solvers import erm_passes

    monkeypatch.setattr(erm, "WARM_START_MIN_ROWS", 1_000)
    monkeypatch.setattr(erm, "WARM_START_ROWS", 300)
    frame = _frame(seed=1)
    parts = write_parts(frame, tmp_path / "p", n_files=3, row_group=350)
    reference = _theta(_spec(tmp_path, parts))
    local = _theta(_spec(tmp_path, parts, engine={"kind": "local", "batch_rows": 1000}))
    dask = _theta(_spec(tmp_path, parts), "--engine", "dask", "--engine-address",
                  cluster.scheduler_address)
    np.testing.assert_allclose(local, reference, rtol=0, atol=1e-9)
    np.testing.assert_allclose(dask, reference, rtol=0, atol=1e-9)
    parts_k = [erm_passes.stride_rows((np.zeros((m, 1)), np.zeros(m), np.zeros(m)), s, k=10)[1].size
               for s, m in ((0, 1234), (1234, 1766))]
    assert sum(parts_k) == len(range(0, N_ROWS, 10))  # a function of the global row index only


def test_worker_failure_mid_run_leaves_no_receipt_and_no_ledger_entry(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpcausal.solvers import erm_line

    parts = write_parts(_frame(), tmp_path / "p", n_files=2, row_group=500)
    spec = _spec(tmp_path, parts, ledger=True,
                 engine={"kind": "dask", "address": cluster.scheduler_address,
                         "batch_rows": 1000})
    real = erm_line.step_pass

    def flaky(part: Any, start: int, **kw: Any) -> Any:  # runs on a worker (a pickled copy)
        if start > 0:  # the second partition fails in the first line-search pass, mid-run
            raise distributed.comm.core.CommClosedError("worker lost")  # a cluster failure: exit 5
        return real(part, start, **kw)

    monkeypatch.setattr(erm_line, "step_pass", flaky)
    res = invoke(["owl", "--spec", spec, "--test-noise-seed", "1"])
    assert res.exit_code == 5, res.stdout + res.stderr
    assert "Dask engine failed mid-run" in res.stderr
    assert not (tmp_path / "out" / "receipt.json").exists()
    assert not (tmp_path / "out" / "rule.json").exists()
    ledger = tmp_path / "ledger.jsonl"
    assert not ledger.exists() or ledger.read_text().strip() == ""
    monkeypatch.setattr(erm_line, "step_pass", real)
    ok = invoke(["owl", "--spec", spec, "--test-noise-seed", "1"])  # the same run, healthy
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert (tmp_path / "out" / "receipt.json").exists()
    assert len(releases(ledger)) == 1


def test_bad_value_on_a_worker_is_a_data_error(tmp_path: Path, cluster: Any) -> None:
    frame = _frame()
    frame.loc[2_500, "x3"] = np.nan
    parts = write_parts(frame, tmp_path / "p", n_files=2, row_group=500)
    for extra in (["--engine", "local"], ["--engine-address", cluster.scheduler_address]):
        res = invoke(["owl", "--spec", _spec(tmp_path, parts), *extra])
        assert res.exit_code == 2, res.stdout + res.stderr
        assert "'x3'" in res.stderr
        # counted over the whole file (every batch or partition), at its global row
        assert "has 1 missing, NaN or infinite value(s) (first at data row 2501)" in res.stderr
        assert not (tmp_path / "out" / "receipt.json").exists()


def test_dry_run_with_an_engine_starts_nothing_and_reads_no_row(tmp_path: Path) -> None:
    parts = write_parts(_frame(), tmp_path / "p", n_files=3, row_group=500)
    res = invoke(["owl", "--spec", _spec(tmp_path, parts), "--dry-run", "--json",
                  "--engine-address", "tcp://127.0.0.1:1"])  # nothing listens there
    assert res.exit_code == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["n_rows"] == N_ROWS


def test_unreachable_scheduler_is_exit_5_and_spends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcausal.engine.dask as dask_engine

    monkeypatch.setattr(dask_engine, "CONNECT_TIMEOUT", "1s")
    parts = write_parts(_frame(), tmp_path / "p", n_files=1, row_group=500)
    spec = _spec(tmp_path, parts, ledger=True, engine={"kind": "dask",
                                                       "address": "tcp://127.0.0.1:1"})
    res = invoke(["owl", "--spec", spec])
    assert res.exit_code == 5, res.stdout + res.stderr
    assert "cannot connect to the Dask scheduler" in res.stderr
    assert not (tmp_path / "ledger.jsonl").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--engine", "spark"], "unknown engine"),
    (["--engine", "local", "--engine-address", "tcp://x:1"], "only used with --engine dask"),
])
def test_bad_engine_options_are_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    csv = tmp_path / "t.csv"
    _frame(n=200).to_csv(csv, index=False)
    res = invoke(["owl", "--spec", _spec(tmp_path, csv), *args])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert needle in res.stderr


@pytest.mark.slow
def test_a_worker_process_that_dies_mid_run_is_replaced_and_the_release_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker death (os._exit in a worker process during a line-search pass): the scheduler
    recomputes the lost partitions on the surviving worker and the release equals the in-memory
    one."""
    import os

    from dpcausal.solvers import erm_line

    parts = write_parts(_frame(), tmp_path / "p", n_files=2, row_group=500)
    reference = _theta(_spec(tmp_path, parts))
    marker = tmp_path / "died"
    real = erm_line.step_pass

    def dies_once(part: Any, start: int, **kw: Any) -> Any:  # pickled by value to the worker
        if start > 0 and not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return real(part, start, **kw)

    monkeypatch.setattr(erm_line, "step_pass", dies_once)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as lc:
        theta = _theta(_spec(tmp_path, parts, engine={"kind": "dask", "batch_rows": 1000,
                                                      "address": lc.scheduler_address}))
    assert marker.exists()
    np.testing.assert_allclose(theta, reference, rtol=0, atol=1e-9)
