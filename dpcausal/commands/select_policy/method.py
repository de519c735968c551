"""select-policy as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run."""

from __future__ import annotations

from dpcausal.commands.select_policy.plan import plan
from dpcausal.commands.select_policy.setup import data_columns, side_inputs
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.method import MethodDef, lazy

METHOD = MethodDef(
    command="select-policy", spec_model=SelectPolicySpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=lazy("dpcausal.commands.select_policy.estimate:run"),
)
