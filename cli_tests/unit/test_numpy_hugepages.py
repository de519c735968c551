"""Issue 24: the command line turns numpy's transparent huge pages off for the commands measured
faster without them (two-stage, owl; benchmarks/RESULTS.md), and leaves the user's choice
alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpcausal.cli.hugepages import VARIABLE, command_of, set_numpy_hugepages


def test_the_command_is_the_first_argument_that_is_not_an_option() -> None:
    assert command_of(["two-stage", "--spec", "s.yaml"]) == "two-stage"
    assert command_of(["--version"]) is None
    assert command_of([]) is None
    assert command_of(["audit", "privacy", "--spec", "s.yaml"]) == "audit"


def test_off_for_two_stage_and_owl_only_and_never_over_the_users_choice() -> None:
    for command in ("two-stage", "owl"):
        env: dict[str, str] = {}
        assert set_numpy_hugepages([command, "--spec", "s.yaml"], env)
        assert env == {VARIABLE: "0"}
    for argv in (["select-policy", "--spec", "s.yaml"], ["cate"], ["audit", "privacy"],
                 ["--version"], []):
        env = {}
        assert not set_numpy_hugepages(argv, env)
        assert env == {}
    for value in ("1", "0"):
        env = {VARIABLE: value}
        assert not set_numpy_hugepages(["two-stage"], env)
        assert env == {VARIABLE: value}


@pytest.mark.parametrize(("argv", "preset", "expected"), [
    (["two-stage", "--help"], None, "0"),
    (["owl", "--help"], None, "0"),
    (["cate", "--help"], None, None),
    (["two-stage", "--help"], "1", "1"),
])
def test_the_cli_sets_it_before_numpy_loads(argv: list[str], preset: str | None,
                                            expected: str | None) -> None:
    script = (f"import os, sys\nsys.argv = ['dpcausal', *{argv!r}]\nfrom dpcausal.cli import main\n"
              "assert 'numpy' not in sys.modules\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              f"print(os.environ.get({VARIABLE!r}))")
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if preset is not None:
        env[VARIABLE] = preset
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         check=True)
    assert res.stdout.strip().splitlines()[-1] == str(expected)
