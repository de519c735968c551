"""Regression tests for the findings of the adversarial review of the foundation (see git log)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from cli_tests.helpers import charge, write_yaml
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger
from dpcausal.commands.owl.plan import plan
from dpcausal.commands.owl.setup import build_setup, side_inputs
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.errors import OutputError, SpecError
from dpcausal.io.release_dir import ReleaseDir
from dpcausal.io.writers import atomic_write
from dpcausal.mechanisms import ExponentialMechanism
from dpcausal.spec.load import load_spec

BASE = {
    "data": {"path": "d.csv", "columns": {"outcome": "B", "treatment": "A", "covariates": ["x1"]}},
    "bounds": {"outcome": [0, 1], "covariates": [0, 1]},
    "privacy": {"epsilon": 1.0},
    "owl": {"treated": 1, "propensity": 0.5, "gamma": 10.0},
}


def _spec(tmp_path: Path, section: str, key: str, value: object) -> Path:
    doc = json.loads(json.dumps(BASE))
    doc[section][key] = value
    return write_yaml(tmp_path / "s.yaml", doc)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("privacy", "epsilon", True), ("privacy", "epsilon", "5"), ("owl", "gamma", True),
     ("owl", "intercept", "yes"), ("owl", "intercept", 1), ("bounds", "outcome", [0, True])],
)
def test_yaml_types_are_not_coerced(tmp_path: Path, section: str, key: str, value: object) -> None:
    with pytest.raises(SpecError, match=rf"{section}\.{key}"):
        load_spec(_spec(tmp_path, section, key, value), OwlSpec)


def test_integers_still_count_as_floats(tmp_path: Path) -> None:
    spec, _ = load_spec(_spec(tmp_path, "privacy", "epsilon", 2), OwlSpec)
    assert spec.privacy.epsilon == 2.0


def test_overflowing_bound_width_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="too wide"):
        load_spec(_spec(tmp_path, "bounds", "outcome", [-1e308, 1e308]), OwlSpec)


@pytest.mark.parametrize(
    "forged",
    ['{"ledger":{"dataset":"d"},"events":[{"epsilon":-10,"delta":0}]}', "[]",
     '{"ledger":{"dataset":"d"},"events":[{"epsilon":"x","delta":0}]}'],
)
def test_spending_refuses_an_untrustworthy_ledger(tmp_path: Path, forged: str) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 0.5, cap=10.0)
    with path.open("a") as fh:
        fh.write(forged + "\n")
    with pytest.raises(OutputError, match="line 4"):
        Ledger(path).state("d", Budget(0.5), Budget(10.0))
    with pytest.raises(OutputError, match="line 4"):
        charge(Ledger(path), 0.5, cap=10.0)


def test_release_files_replace_the_previous_set(tmp_path: Path) -> None:
    out = ReleaseDir(tmp_path / "out")
    out.preflight()
    out.stage({"a.csv": b"1", "b.csv": b"2"}).publish("v1")
    staged = out.stage({"a.csv": b"3"})
    staged.add("receipt.json", b"{}")
    staged.publish("v2")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.csv", "receipt.json"]


def test_outputs_have_the_usual_mode(tmp_path: Path) -> None:
    atomic_write(tmp_path / "f.json", b"{}")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == 0o666 & ~umask


def test_exponential_mechanism_survives_extreme_scores() -> None:
    mech = ExponentialMechanism(1.0, 1e-300)
    picks = {mech.release(np.array([0.0, 1e-290, 5e-291]), rng=np.random.default_rng(i))
             for i in range(20)}
    assert picks == {1}


def test_csv_parse_errors_do_not_echo_rows(tmp_path: Path) -> None:
    bad = tmp_path / "ragged.csv"
    bad.write_text("x1,A,B\n0.1,1,1.0\n0.2,0,2.0,SSN-123-45\n")
    from dpcausal.errors import DataError
    from dpcausal.io.tables import inspect_table

    with pytest.raises(DataError) as info:
        inspect_table(bad)
    assert "SSN" not in str(info.value) and "row content not shown" in str(info.value)


def test_owl_refuses_tuning_on_the_training_file_and_unused_roles(tmp_path: Path) -> None:

    doc = json.loads(json.dumps(BASE))
    doc["owl"].pop("gamma")
    doc["owl"]["tune"] = {"public_data": "d.csv", "grid": [1.0]}
    with pytest.raises(SpecError, match=r"owl\.tune\.public_data"):
        side_inputs(OwlSpec.model_validate(doc))
    doc = json.loads(json.dumps(BASE))
    doc["data"]["columns"]["propensity"] = "p"
    with pytest.raises(SpecError, match=r"data\.columns\.propensity"):
        build_setup(OwlSpec.model_validate(doc))
    doc = json.loads(json.dumps(BASE))
    doc["owl"]["propensity"] = {"column": "x1", "floor": 0.1}
    with pytest.raises(SpecError, match="another role"):
        build_setup(OwlSpec.model_validate(doc))


def test_owl_tiny_gamma_is_a_spec_error(tmp_path: Path) -> None:

    doc = json.loads(json.dumps(BASE))
    doc["owl"]["gamma"] = 1e-310
    with pytest.raises(SpecError, match=r"owl\.gamma"):
        plan(OwlSpec.model_validate(doc), 10, {}, rng=np.random.default_rng(0))
