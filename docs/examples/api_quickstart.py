# %% [markdown]
# # dpcausal from Python: plan, release, plot
#
# A notebook in plain Python (the `# %%` cells open as a notebook in Jupyter with jupytext, in
# VS Code and in PyCharm). Run it from the repository root: it uses `configs/` and
# `sample_data/`. CI executes it (`cli_tests/e2e/test_docs_example.py`).
#
# Everything here is what `dpcausal owl --spec configs/owl.yaml` does, with the data as a pandas
# DataFrame and the results as Python objects.

# %%
import tempfile
from pathlib import Path

import pandas as pd

import dpcausal as dpc

work = Path(tempfile.mkdtemp(prefix="dpcausal-quickstart-"))
ledger = work / "ledger.jsonl"  # a fresh ledger for this walk-through (the spec's cap applies)
pd.set_option("display.width", 120)

# %% [markdown]
# ## The spec and the data
#
# A spec is the same validated model as the command line's `--spec` file: load the YAML file, or
# build it from a dict or keyword arguments with `dpc.build_spec`. The data is any DataFrame
# (or a pyarrow Table, or a path) with the spec's columns.

# %%
spec = dpc.load_spec("configs/owl.yaml")
trial = pd.read_csv("sample_data/owl_trial.csv")
print(spec.privacy, spec.bounds.outcome)

# %% [markdown]
# ## The plan: what the release will cost, before any value is read
#
# `dpc.plan` is the dry run: every mechanism with its ε, sensitivity and noise scale, the
# predicted half-width of each released quantity, and the ledger's spend after the run. It reads
# the table's column names and row count only.

# %%
plan = dpc.plan(spec, trial, ledger=ledger)
print(plan)
print(plan.accuracy[["quantity", "halfwidth", "units", "kind"]])
assert plan.ok  # neither the cap nor the accuracy guard refuses it

# %% [markdown]
# ## The release
#
# `dpc.release` runs the plan: it reads and clips the rows, draws the noise once, charges the
# ledger, and returns the release (kept in memory until saved).

# %%
release = dpc.release(spec, trial, ledger=ledger)
print(release.receipt["guarantee"], release.receipt["epsilon"], release.dp_guarantee)
print(release.receipt["ledger"]["spent_after"])
print(release.intervals[["quantity", "estimate", "lo", "hi"]].head(8))

# %% [markdown]
# ## Its picture, and the rule applied to new patients
#
# `release.plot()` returns a matplotlib figure (a notebook shows it). Applying the released rule to
# new rows is post-processing: no privacy cost, no ledger line.

# %%
fig = release.plot()
fig.savefig(work / "owl_rule.png")

new_patients = pd.read_csv("sample_data/owl_new_patients.csv")
recommendations = dpc.apply_rule(release, new_patients)
print(recommendations[["recommended", "margin", "margin_noise_lo", "margin_noise_hi",
                       "noise_could_flip"]].head())

# %% [markdown]
# ## Publishing it, and the budget
#
# `release.save(DIR)` writes the files and `receipt.json` as the command line does (whole, or
# not at all). The ledger caps the dataset: a release that would pass the cap is refused before
# any row is read, with the command line's exit-code class.

# %%
paths = release.save(work / "owl")
print([p.name for p in paths])

try:
    dpc.release(spec, trial, ledger=ledger, epsilon=100.0)
except dpc.BudgetExceededError as refusal:
    print(f"refused (exit code {refusal.exit_code}): {refusal}")

# %% [markdown]
# ## The ledger, and an audit of the privacy claim
#
# `dpc.ledger` has the `dpcausal ledger` commands: here the dataset's cap is lowered (a keyed line
# in the ledger; raising it needs `allow_raise=True`). `dpc.verify` checks the ledger's chain and
# each dataset's spend against its cap. `dpc.audit_privacy` runs the command on neighbouring
# synthetic data sets and measures the privacy loss against the claimed ε: nothing is released or
# charged.

# %%
assert spec.ledger is not None  # configs/owl.yaml caps its dataset
dataset = spec.ledger.dataset
lowered = dpc.ledger.set_cap(ledger, dataset, 12.0, note="the rest of the quarter")
print(lowered.records[0]["reason"], lowered.records[0]["cap"])
print(dpc.verify(ledger).totals[dataset])

audit = dpc.audit_privacy(spec, pairs=12, trials=0)
print(audit.to_dict()["verdict"], f"max privacy loss {audit.max_loss:.3f} ≤ ε = {audit.epsilon}")
