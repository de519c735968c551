"""Issue 24: figures are optional everywhere (``plot: false``), and a run that draws none never
imports matplotlib; ``audit privacy`` compares releases without drawing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_tests.helpers import REPO
from dpcausal.commands import by_name

FIGURES = {"synth-control": "synth_control.png", "owl": "rule.png", "two-stage": "rule.png",
           "cate": "cate.png", "select-policy": "selection.png"}


@pytest.mark.parametrize("command", ["synth-control", "select-policy"])
def test_plot_false_writes_no_figure_and_loads_no_matplotlib(command: str,
                                                             tmp_path: Path) -> None:
    section = command.replace("-", "_")
    doc = yaml.safe_load((REPO / "configs" / f"{section}.yaml").read_text())
    doc[section]["plot"] = False
    for key in ("path",):
        doc["data"][key] = str(REPO / doc["data"][key])
    if "library" in doc[section]:  # select-policy's library file, read from the run's directory
        doc[section]["library"]["path"] = str(REPO / doc[section]["library"]["path"])
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    script = (
        "import sys\nfrom dpcausal.cli import app\n"
        f"try:\n    app({[command, '--spec', str(spec), '--out', str(tmp_path / 'out'), '--ledger', str(tmp_path / 'l.jsonl'), '--quiet']!r})\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('matplotlib' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "False"
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert FIGURES[command] not in written, written
    receipt = json.loads((tmp_path / "out" / "receipt.json").read_text())
    assert FIGURES[command] not in json.dumps(receipt.get("outputs", {}))


@pytest.mark.parametrize("command", sorted(FIGURES))
def test_the_audit_draws_no_figure(command: str) -> None:
    adapter = by_name(command).audit_adapter()
    spec_model = by_name(command).spec_model()
    section = command.replace("-", "_")
    doc = yaml.safe_load((REPO / "configs" / f"{section}.yaml").read_text())
    spec = spec_model.model_validate(doc)
    assert getattr(spec, section).plot is True
    assert adapter.audit_spec is not None
    assert getattr(adapter.audit_spec(spec), section).plot is False
