"""select-policy on the engines (DESIGN §5): in-memory, local streaming and a 2-worker Dask
LocalCluster give the same release (same test noise seed) for every regime and split, whatever the
partitioning; a failure mid-run publishes and charges nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cli_tests.conftest import REPO
from cli_tests.helpers import invoke, read_json, write_yaml
from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.method import METHOD
from dpcausal.commands.select_policy.setup import build_setup, data_columns

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sp")
    frame = pd.read_csv(REPO / "sample_data" / "select_policy_obs.csv")
    rng = np.random.default_rng(2)
    frame["q1"] = frame["Y"] + rng.normal(0.0, 0.5, len(frame))
    frame["q0"] = frame["Y"] + rng.normal(0.0, 0.5, len(frame))
    csv = root / "obs.csv"
    frame.to_csv(csv, index=False)
    parts = root / "parts"
    parts.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(frame)), 4)):
        pq.write_table(pa.Table.from_pandas(frame.iloc[idx], preserve_index=False),
                       parts / f"p{i}.parquet", row_group_size=300)
    return {"csv": csv, "parts": parts}


BASE = yaml.safe_load((REPO / "configs" / "select_policy.yaml").read_text())

REGIMES = {
    "learned-index": {"split": {"kind": "index"}},
    "learned-seeded": {"split": {"kind": "seeded", "seed": 5}},
    "frozen": {"regime": "frozen",
               "frozen_model": str(REPO / "sample_data" / "select_policy_nuisance.json")},
    "fixed": {"regime": "fixed", "fixed_scores": {"treated": "q1", "control": "q0", "bound": 2.0}},
}


def _spec(tmp: Path, data: Path, regime: str, engine: dict[str, Any] | None = None,
          ledger: bool = False) -> Path:
    doc = copy.deepcopy(BASE)
    doc.pop("ledger")
    doc["data"]["path"] = str(data)
    doc["output"]["dir"] = str(tmp / "out")
    doc["select_policy"]["library"] = {"path": str(REPO / "configs" / "policies_example.yaml")}
    doc["select_policy"].update(REGIMES[regime])
    doc["select_policy"]["value_release"] = {"epsilon": 0.5}
    if engine is not None:
        doc["engine"] = engine
    if ledger:
        doc["ledger"] = {"path": str(tmp / "ledger.jsonl"), "dataset": "d",
                         "budget": {"epsilon": 100.0}}
    return write_yaml(tmp / "spec.yaml", doc)


def _release(spec: Path, *extra: Any) -> tuple[str, float]:
    res = invoke(["select-policy", "--spec", spec, "--json", "--test-noise-seed", "4", *extra])
    assert res.exit_code == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    doc = read_json(Path(out["output_paths"][0]).parent / "selection.json")
    value = out["summary"].get("released_value")
    return json.dumps(doc["selected"], sort_keys=True), value and value["estimate"]


@pytest.mark.parametrize("regime", list(REGIMES))
def test_engines_give_the_same_release(tmp_path: Path, cluster: Any, data: dict[str, Path],
                                       regime: str) -> None:
    reference = _release(_spec(tmp_path, data["csv"], regime))
    runs = {
        "local, csv": _release(_spec(tmp_path, data["csv"], regime,
                                     {"kind": "local", "batch_rows": 1000, "cache_mb": 0})),
        "local, parts": _release(_spec(tmp_path, data["parts"], regime), "--engine", "local"),
        "dask, parts": _release(_spec(tmp_path, data["parts"], regime,
                                      {"kind": "dask", "batch_rows": 1000,
                                       "address": cluster.scheduler_address})),
    }
    for name, (selected, value) in runs.items():
        assert selected == reference[0], name
        assert value == pytest.approx(reference[1], abs=1e-10), name


def test_worker_failure_leaves_no_receipt_and_no_ledger_entry(
    tmp_path: Path, cluster: Any, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcausal.commands.select_policy.engine as engine_sp

    real = engine_sp.utility_sums

    def flaky(part: Any, start: int, **kw: Any) -> Any:  # runs on a worker
        if start > 0:
            raise distributed.comm.core.CommClosedError("worker lost")  # a cluster failure: exit 5
        return real(part, start, **kw)

    monkeypatch.setattr(engine_sp, "utility_sums", flaky)
    spec = _spec(tmp_path, data["parts"], "learned-index", ledger=True,
                 engine={"kind": "dask", "address": cluster.scheduler_address,
                         "batch_rows": 1000})
    res = invoke(["select-policy", "--spec", spec])
    assert res.exit_code == 5, res.stdout + res.stderr
    assert not (tmp_path / "out" / "receipt.json").exists()
    assert not (tmp_path / "out" / "selection.json").exists()
    ledger = tmp_path / "ledger.jsonl"
    assert not ledger.exists() or ledger.read_text().strip() == ""


@pytest.mark.parametrize("regime", ["learned-index", "learned-seeded"])
def test_learned_nuisances_come_from_partition_sums_not_gathered_rows(
    tmp_path: Path, data: dict[str, Path], regime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certified learners on the engine equal the in-memory fits (to float summation order)
    and the utilities too, while no pass ever returns rows: ``map_list`` (which the learners use
    to add their per-batch sums exactly rounded) only ever returns fixed-size statistics."""
    from dpcausal.commands.select_policy import engine as esp
    from dpcausal.commands.select_policy.spec import SelectPolicySpec
    from dpcausal.engine import open_engine
    from dpcausal.engine.local import LocalEngine
    from dpcausal.io import tables
    from dpcausal.pipeline import load_side_inputs
    from dpcausal.spec.load import load_spec

    real_map_list = LocalEngine.map_list
    sizes: set[int] = set()

    def statistics_only(self: Any, stat: Any) -> Any:
        out = real_map_list(self, stat)
        for item in out:  # the same size for every batch: a statistic, not the batch's rows
            sizes.add(sum(np.asarray(v).size for v in item))
        return out

    monkeypatch.setattr(LocalEngine, "map_list", statistics_only)
    spec, _ = load_spec(_spec(tmp_path, data["parts"], regime, engine={"kind": "local",
                                                                        "batch_rows": 1000}),
                     SelectPolicySpec)
    info = tables.inspect_table(spec.data.path)
    side = load_side_inputs(METHOD, spec)
    setup = build_setup(spec, info.n_rows, side)
    frame = tables.read_table(spec.data.path, data_columns(spec))
    reference = compute_utilities(spec, setup, frame, side)
    assert spec.engine is not None
    with open_engine(spec.engine, info, data_columns(spec)) as engine:
        utilities = esp.compute_utilities(spec, setup, engine, side)
        assert engine.passes >= 3  # ridge sums, ≥ 1 logistic Newton pass, utilities
    np.testing.assert_allclose(utilities, reference, rtol=1e-10, atol=1e-9)
    p = setup.inputs.fmap.dim  # ridge: 2 arms × (p² + p); logistic: 1 + p + p²
    assert sizes == {2 * (p * p + p), 1 + p + p * p}
