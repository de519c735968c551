"""The noise guard through the real pipeline: every command's release draws every planned stage once
through it (in memory and on an engine), and a draw that breaks the plan stops the run with exit 1
before anything is written or charged (issue #13, finding 4)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, write_yaml
from dpcausal.commands.owl import engine as engine_owl
from dpcausal.commands.owl import estimate as owl_estimate
from dpcausal.commands.owl import method as owl_method
from dpcausal.commands.owl import plan as owl_plan
from dpcausal.commands.owl.method import METHOD
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {"owl": "owl.yaml", "select-policy": "select_policy.yaml",
           "synth-control": "synth_control.yaml", "cate": "cate.yaml", "two-stage": "two_stage.yaml"}
ENGINE_CHANGES = {"cate": {"features": "rff", "rff_dim": 20}}  # cate's engine path is rff only


def _spec(command: str, engine: bool = False) -> Path:
    doc = yaml.safe_load((REPO / "configs" / CONFIGS[command]).read_text())
    section = command.replace("-", "_")
    doc[section].pop("apply_to", None)
    doc[section].pop("plot", None) if command == "cate" else None
    if engine:
        doc[section].update(ENGINE_CHANGES.get(command, {}))
    return write_yaml(Path(f"{section}.yaml"), doc)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Record (stages drawn, stages planned) of every guard the pipeline checks."""
    seen: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    real = NoiseGuard.check_all_drawn

    def spy(self: NoiseGuard) -> None:
        seen.append((self.drawn, tuple(self._planned)))
        real(self)

    monkeypatch.setattr(NoiseGuard, "check_all_drawn", spy)
    return seen


@pytest.mark.parametrize(("command", "engine"), [
    *[(c, False) for c in CONFIGS], *[(c, True) for c in ("owl", "select-policy", "two-stage", "cate")]])
def test_every_release_draws_each_planned_stage_once_through_the_guard(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, command: str, engine: bool) -> None:
    seen = _spy(monkeypatch)
    res = invoke([command, "--spec", _spec(command, engine), *(["--engine", "local"] if engine else [])])
    assert res.exit_code == 0, res.output
    assert len(seen) == 1
    drawn, planned = seen[0]
    assert drawn == planned and len(planned) >= 1  # each planned stage, once, in the plan's order
    receipt = read_json(workdir / "out" / command.replace("-", "_") / "receipt.json")
    assert [e["stage"] for e in receipt["events"]] == list(planned)
    assert receipt["rng"] == "chacha20/os-entropy"


def _nothing_written_or_charged(workdir: Path, res: Any) -> None:
    assert res.exit_code == 1, res.output
    assert "NoiseGuardError" in res.stderr and "internal error" in res.stderr.lower()
    assert list((workdir / "out").iterdir()) == []  # no output, no staging, no ledger line


@pytest.mark.parametrize("engine", [False, True])
def test_a_draw_that_does_not_match_the_plan_stops_the_run(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, engine: bool) -> None:
    """The run draws with half the planned sensitivity (the plan, built first, is right)."""
    real = mechanism
    calls: list[int] = []

    def halved_after_planning(setup: Any, gamma: float, epsilon: float, n: int) -> Any:
        mech = real(setup, gamma, epsilon, n)
        calls.append(1)
        if len(calls) == 1:  # the plan's call
            return mech
        return dataclasses.replace(mech, l2_sensitivity=mech.l2_sensitivity / 2)

    for module in (owl_plan, owl_estimate, engine_owl):  # every user of the mechanism
        monkeypatch.setattr(module, "mechanism", halved_after_planning)
    res = invoke(["owl", "--spec", _spec("owl"), *(["--engine", "local"] if engine else [])])
    _nothing_written_or_charged(workdir, res)
    assert len(calls) == 2


def test_a_stage_drawn_twice_stops_the_run(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = METHOD.run

    def twice(*args: Any, **kwargs: Any) -> Release:
        real_run(*args, **kwargs)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(owl_method, "METHOD", dataclasses.replace(METHOD, run=twice))
    _nothing_written_or_charged(workdir, invoke(["owl", "--spec", _spec("owl")]))


def test_a_planned_stage_never_drawn_stops_the_run(workdir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def no_noise(spec: Any, frame: Any, plan: Any, side: Any, *, rng: Any, noise: Any) -> Release:
        return Release(documents={"rule.json": {"theta": np.zeros(5).tolist()}})

    monkeypatch.setattr(owl_method, "METHOD", dataclasses.replace(METHOD, run=no_noise))
    _nothing_written_or_charged(workdir, invoke(["owl", "--spec", _spec("owl")]))
