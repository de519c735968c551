"""owl as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run."""

from __future__ import annotations

from dpcausal.commands.owl.plan import plan
from dpcausal.commands.owl.setup import data_columns, side_inputs
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.method import MethodDef, lazy

METHOD = MethodDef(
    command="owl", spec_model=OwlSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=lazy("dpcausal.commands.owl.estimate:run"),
)
