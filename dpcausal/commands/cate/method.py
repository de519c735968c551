"""cate as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run."""

from __future__ import annotations

from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.setup import data_columns, side_inputs
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.method import MethodDef, lazy

METHOD = MethodDef(
    command="cate", spec_model=CateSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=lazy("dpcausal.commands.cate.estimate:run"),
)
