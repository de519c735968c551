"""synth-control as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run."""

from __future__ import annotations

from dpcausal.commands.synth_control.panel import data_columns
from dpcausal.commands.synth_control.plan import plan
from dpcausal.commands.synth_control.setup import side_inputs
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.method import MethodDef, lazy

METHOD = MethodDef(
    command="synth-control", spec_model=SynthControlSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=lazy("dpcausal.commands.synth_control.estimate:run"),
)
