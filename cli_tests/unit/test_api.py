"""Issue 21: the Python API's names, specs, in-memory tables, errors and results."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import yaml

import dpcausal as dpc
from dpcausal import errors

REPO = Path(__file__).resolve().parents[2]
OWL = REPO / "configs" / "owl.yaml"


def owl_doc() -> dict[str, Any]:
    doc = yaml.safe_load(OWL.read_text())
    doc.pop("ledger")
    return doc


def owl_frame() -> pd.DataFrame:
    return pacsv.read_csv(REPO / "sample_data" / "owl_trial.csv").to_pandas()


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def test_import_dpcausal_loads_no_numpy_until_the_api_is_used(tmp_path: Path) -> None:
    """``import dpcausal`` loads no heavy module; naming an API function loads none either (its
    module is imported lazily), and planning on a CSV path loads numpy but not pandas (issue
    24: a plan reads the file's header and row count only)."""
    script = ("import sys, dpcausal\n"
              "names = (dpcausal.__version__, dpcausal.SpecError, dpcausal.EXIT_PRIVACY)\n"
              "heavy = ('numpy', 'pandas', 'scipy', 'pyarrow', 'pydantic')\n"
              "print([m for m in sys.modules if m.split('.')[0] in heavy])\n"
              "dpcausal.plan\n"
              "print('numpy' in sys.modules)\n"
              "dpcausal.plan(dpcausal.load_spec('configs/owl.yaml'), "
              f"ledger={str(tmp_path / 'ledger.jsonl')!r})\n"
              "print('numpy' in sys.modules, 'pandas' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert res.stdout.split("\n")[:3] == ["[]", "False", "True False"], res.stdout


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in dpc.__all__:
        assert getattr(dpc, name) is not None, name
    assert set(dpc.__all__) <= set(dir(dpc))
    with pytest.raises(AttributeError, match="no attribute 'relase'"):
        dpc.relase  # noqa: B018
    assert (REPO / "dpcausal" / "py.typed").exists()


@pytest.mark.parametrize(("error", "code"), [
    (dpc.SpecError, 2), (dpc.DataError, 2), (dpc.SolverError, 2), (dpc.PrivacyError, 3),
    (dpc.BudgetExceededError, 3), (dpc.AccuracyRefusedError, 3), (dpc.MissingBoundsError, 3),
    (dpc.UncertifiedModeError, 3), (dpc.AuditViolation, 4), (dpc.OutputError, 5),
    (dpc.LedgerLockError, 5), (dpc.LedgerIntegrityError, 5), (dpc.EngineError, 5)])
def test_the_errors_carry_the_cli_exit_codes(error: type[dpc.DPCausalError], code: int) -> None:
    assert issubclass(error, dpc.DPCausalError)
    assert error("x").exit_code == code
    assert error is getattr(errors, error.__name__)


def test_a_spec_from_a_dict_or_keywords_is_the_yaml_spec(in_repo: None) -> None:
    doc = yaml.safe_load(OWL.read_text())
    from_file = dpc.load_spec(OWL)
    assert dpc.build_spec("owl", doc) == from_file
    assert dpc.build_spec(**doc) == from_file  # the command from its section
    sections = {k: v for k, v in doc.items() if k != "privacy"}
    built = dpc.build_spec("owl", sections, privacy={"epsilon": np.float64(2.0), "delta": 0})
    assert built.privacy.epsilon == 2.0
    assert dpc.build_spec("owl", doc, owl={**doc["owl"], "gamma": np.int64(60)}).owl.gamma == 60
    assert dpc.load_spec(OWL, "owl") == from_file
    assert dpc.command_of(from_file).name == "owl"


@pytest.mark.parametrize(("change", "field"), [
    ({"privacy": {"epsilon": "5"}}, "privacy.epsilon"),  # a string is not a number
    ({"owl": {**owl_doc()["owl"], "gama": 3}}, "owl.gama"),
    ({"bounds": {"outcome": [1.0, 0.0]}}, "bounds.outcome"),
])
def test_build_spec_validates_as_strictly_as_a_file(change: dict[str, Any], field: str) -> None:
    with pytest.raises(dpc.SpecError) as info:
        dpc.build_spec("owl", owl_doc(), **change)
    assert info.value.exit_code == 2
    assert info.value.field == field
    assert str(info.value).startswith(f"<owl spec>: {field}: ")


def test_build_spec_needs_one_command() -> None:
    with pytest.raises(dpc.SpecError, match="cannot tell which command"):
        dpc.build_spec({"privacy": {"epsilon": 1.0}})
    with pytest.raises(dpc.SpecError, match="unknown command 'owls'"):
        dpc.build_spec("owls", owl_doc())
    with pytest.raises(TypeError, match="not a dpcausal spec"):
        dpc.plan(object(), owl_frame())  # type: ignore[arg-type]


def test_the_receipt_hashes_the_spec_file_or_the_specs_canonical_json(in_repo: None) -> None:
    loaded = dpc.load_spec(OWL)
    assert dpc.spec_sha256(loaded) == hashlib.sha256(OWL.read_bytes()).hexdigest()
    changed = loaded.model_copy(update={"ledger": None})
    canonical = json.dumps(changed.model_dump(mode="json"), sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    assert dpc.spec_sha256(changed) == hashlib.sha256(canonical.encode()).hexdigest()
    doc = owl_doc()
    reordered = dict(reversed(list(doc.items())))
    assert dpc.spec_sha256(dpc.build_spec("owl", doc)) == \
        dpc.spec_sha256(dpc.build_spec("owl", reordered)) == dpc.spec_sha256(changed)


def test_schema_is_the_cli_schema() -> None:
    from cli_tests.helpers import invoke

    assert dpc.schema("cate") == json.loads(invoke(["schema", "cate"]).stdout)


def test_a_frame_goes_through_arrow_as_a_file_does(in_repo: None) -> None:
    """Pandas-only types arrive as a file would hold them: a categorical as its labels, a
    nullable integer as numbers; the same release."""
    spec = dpc.build_spec("owl", owl_doc())
    frame = owl_frame()
    odd = frame.assign(A=frame["A"].astype("category"), x1=frame["x1"].astype("Float64"),
                       B=frame["B"].astype("Float64"))
    plain = dpc.release(spec, frame, test_noise_seed=1)
    assert dpc.release(spec, odd, test_noise_seed=1).files == plain.files
    ints = frame.assign(A=frame["A"].astype("Int64"))
    assert dpc.release(spec, ints, test_noise_seed=1).files == plain.files
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    assert dpc.release(spec, arrow, test_noise_seed=1).files == plain.files
    shuffled_index = frame.set_index(np.arange(len(frame))[::-1])  # the index is not data
    assert dpc.release(spec, shuffled_index, test_noise_seed=1).files == plain.files


def test_a_frame_with_mixed_values_is_refused_naming_the_column_not_the_cell(in_repo: None
                                                                              ) -> None:
    frame = owl_frame().astype({"x2": object})
    frame.loc[4, "x2"] = "secret-value-123"
    frame.loc[5, "x2"] = 7  # mixed: text and numbers in one object column
    with pytest.raises(dpc.DataError) as info:
        dpc.release(dpc.build_spec("owl", owl_doc()), frame)
    assert info.value.column == "x2" and info.value.exit_code == 2
    assert "secret" not in str(info.value)


def test_a_frame_with_duplicate_or_nested_column_names_is_refused(in_repo: None) -> None:
    spec = dpc.build_spec("owl", owl_doc())
    frame = owl_frame()
    doubled = pd.concat([frame, frame[["x1"]]], axis=1)
    with pytest.raises(dpc.DataError, match="2 columns named 'x1'"):
        dpc.plan(spec, doubled)
    nested = frame.copy()
    nested.columns = pd.MultiIndex.from_tuples([("a", c) for c in frame.columns])
    with pytest.raises(dpc.DataError, match="MultiIndex"):
        dpc.plan(spec, nested)


def test_an_engine_is_for_files_and_data_must_be_a_table_or_a_path(in_repo: None) -> None:
    spec = dpc.build_spec("owl", owl_doc())
    with pytest.raises(dpc.SpecError, match="already in memory"):
        dpc.plan(spec, owl_frame(), engine="local")
    assert dpc.plan(spec, "sample_data/owl_trial.csv", engine="local").ok
    with pytest.raises(TypeError, match="pandas DataFrame, a pyarrow Table, a path or None"):
        dpc.plan(spec, [[1, 2]])


def test_in_memory_the_charge_comes_first_and_save_publishes_whole(in_repo: None,
                                                                   tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    spec = dpc.load_spec(OWL)
    release = dpc.release(spec, owl_frame(), ledger=ledger)
    lines = ledger.read_text().splitlines()
    assert json.loads(lines[-1])["hash"] == release.receipt["hash"]  # charged, nothing written
    assert release.paths == () and release.dp_guarantee
    out = tmp_path / "rel"
    paths = release.save(out)
    assert paths[-1] == out / "receipt.json"
    assert json.loads((out / "receipt.json").read_text()) == release.receipt
    assert ledger.read_text().splitlines() == lines  # saving spends nothing
    from cli_tests.helpers import invoke

    assert invoke(["audit", "verify", "--ledger", ledger, "--receipt",
                   out / "receipt.json"]).exit_code == 0
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(dpc.OutputError) as info:
        release.save(blocker / "sub")
    assert info.value.exit_code == 5


def test_the_plan_reports_a_refusal_and_release_raises_it(in_repo: None) -> None:
    doc = owl_doc()
    spec = dpc.build_spec("owl", doc, accuracy={"max_halfwidth": 0.01})
    plan = dpc.plan(spec, owl_frame())
    assert not plan.ok and isinstance(plan.refusal, dpc.AccuracyRefusedError)
    with pytest.raises(dpc.AccuracyRefusedError):
        plan.check()
    with pytest.raises(dpc.AccuracyRefusedError) as info:
        dpc.release(spec, owl_frame())
    assert info.value.exit_code == 3
    target = dpc.plan(dpc.build_spec("owl", doc), owl_frame(), target_halfwidth=0.5)
    assert target.target is not None and "target" in target.to_dict()
    assert "predicted accuracy" in str(target) and "owl" in repr(target)


def test_release_results_intervals_and_plot(in_repo: None) -> None:
    import matplotlib

    before = matplotlib.get_backend()
    release = dpc.release(dpc.build_spec("owl", owl_doc()), owl_frame(), test_noise_seed=2)
    assert matplotlib.get_backend() == before  # a release leaves a notebook's backend alone
    iv = release.intervals
    assert {"intervals.theta[0]", "intervals.coefficients_original_units.x1"} <= set(iv["quantity"])
    assert (iv["lo"] <= iv["estimate"]).all() and (iv["estimate"] <= iv["hi"]).all()
    recs = release.tables["recommendations"]
    assert {"recommended", "margin_noise_lo", "margin_noise_hi"} <= set(recs.columns)
    fig = release.plot()
    assert fig.get_axes()
    with pytest.raises(ValueError, match=r"no figure named 'cate\.png'"):
        release.plot("cate.png")
    assert "released: in memory only" in str(release)


def test_plot_draws_the_intervals_when_a_command_releases_no_picture(in_repo: None) -> None:
    release = dpc.release(dpc.build_spec("owl", owl_doc()), owl_frame(), test_noise_seed=2)
    bare = type(release)(command="owl", plan=release.plan, receipt=release.receipt,
                         documents=release.documents)
    assert bare.plot().get_axes()[0].get_title().startswith("owl, ε = 5")
    empty = type(release)(command="owl", plan=release.plan, receipt=release.receipt)
    with pytest.raises(ValueError, match="no figure and no number"):
        empty.plot()


def test_apply_rule_with_a_frame_is_the_cli_apply(in_repo: None, tmp_path: Path) -> None:
    from cli_tests.helpers import invoke

    release = dpc.release(dpc.build_spec("owl", owl_doc()), owl_frame(), test_noise_seed=3,
                          out=tmp_path / "rel")
    rows = pacsv.read_csv(REPO / "sample_data" / "owl_new_patients.csv").to_pandas()
    scored = dpc.apply_rule(release, rows)
    res = invoke(["owl", "--apply", tmp_path / "rel" / "rule.json", "--data",
                  "sample_data/owl_new_patients.csv", "--out", tmp_path / "applied"])
    assert res.exit_code == 0, res.stderr
    cli = pd.read_csv(tmp_path / "applied" / "recommendations.csv")
    pd.testing.assert_frame_equal(scored.reset_index(drop=True), cli, check_dtype=False)
    assert dpc.apply_rule(tmp_path / "rel" / "rule.json", rows).equals(scored)
    with pytest.raises(dpc.DataError, match="not a dpcausal two-stage rule file"):
        dpc.apply_rule(release, rows, command="two-stage")


def test_the_ledger_functions_take_paths_and_refuse_what_the_options_refuse(
        tmp_path: Path) -> None:
    ledger = tmp_path / "new" / "dir" / "ledger.jsonl"  # init creates its directory
    made = dpc.ledger.init(ledger, dataset="trial", epsilon=4, accountant="pld")
    assert [r["kind"] for r in made.records] == ["ledger-init", "cap"]
    assert made.location == str(ledger) and made.key_location == f"{ledger}.key"
    assert made.records[1]["cap"] == {"epsilon": 4.0, "delta": 0.0}
    lowered = dpc.ledger.set_cap(str(ledger), "trial", 3.5, note="safer")
    assert lowered.records[0]["reason"] == "lower" and lowered.records[0]["note"] == "safer"
    with pytest.raises(dpc.BudgetExceededError, match="rerun with --raise"):
        dpc.ledger.set_cap(ledger, "trial", 5)
    for bad in ("4", None, True, float("inf")):
        with pytest.raises(dpc.SpecError, match="--epsilon must be"):
            dpc.ledger.set_cap(ledger, "trial", bad)  # type: ignore[arg-type]
    with pytest.raises(dpc.SpecError, match="go together"):
        dpc.ledger.init(tmp_path / "other.jsonl", dataset="trial")
    assert not (tmp_path / "other.jsonl").exists()
    with pytest.raises(dpc.OutputError, match="ledger not found"):
        dpc.ledger.repair(tmp_path / "none.jsonl")
    assert dpc.verify(ledger).totals["trial"]["cap"]["epsilon"] == 3.5


def test_audit_privacy_refuses_bad_options_before_running(in_repo: None) -> None:
    spec = dpc.build_spec("owl", owl_doc())
    for option, value in (("pairs", 0), ("rows", 1), ("trials", -1)):
        with pytest.raises(dpc.SpecError, match=f"--{option} must be at least"):
            dpc.audit_privacy(spec, **{option: value})
    with pytest.raises(TypeError, match="data must be"):
        dpc.audit_privacy(spec, data=[1, 2, 3])
