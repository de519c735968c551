"""The console script's entry point (dpcausal/__main__.py): the CLI imported with the garbage
collector paused and its objects frozen, the collector left as the caller had it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

SCRIPT = """
import gc, sys
{before}
sys.argv = ["dpcausal", "--version"]
from dpcausal.__main__ import main
try:
    main()
except SystemExit as exc:
    assert exc.code in (None, 0), exc.code
print(gc.isenabled(), gc.get_freeze_count() > 1000, "dpcausal.cli" in sys.modules)
"""


@pytest.mark.parametrize(("before", "enabled"), [("", "True"), ("gc.disable()", "False")])
def test_main_freezes_the_imports_and_restores_the_collector(before: str, enabled: str) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(before=before)], check=True,
                         capture_output=True, text=True).stdout.split()
    assert out[-3:] == [enabled, "True", "True"]
    assert out[0] == "dpcausal"  # the version line came from the real CLI


def test_the_console_script_is_this_entry_point() -> None:
    (script,) = [e for e in metadata.entry_points(group="console_scripts")
                 if e.name == "dpcausal"]
    assert script.value == "dpcausal.__main__:main"


def test_python_dash_m_runs_the_cli() -> None:
    res = subprocess.run([sys.executable, "-m", "dpcausal", "--version"], check=True,
                         capture_output=True, text=True)
    assert res.stdout.startswith("dpcausal ")
