"""The human form of a plan and of a release: what ``dpcausal <command>`` prints, and what
``str(plan)`` / ``str(release)`` give in Python."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from dpcausal.accounting.ledger import LedgerState
    from dpcausal.accounting.plan import PrivacyPlan
    from dpcausal.planner import TargetReport


class Plan(Protocol):
    """What a plan's printout reads (:class:`dpcausal.Plan`)."""

    @property
    def privacy(self) -> PrivacyPlan:
        """The privacy plan."""

    @property
    def n_rows(self) -> int:
        """The data's row count."""

    @property
    def ledger(self) -> LedgerState | None:
        """The ledger's spend before and after, and its cap."""

    @property
    def target(self) -> TargetReport | None:
        """The target half-width's report."""


def fmt(x: Any) -> str:
    """A number as the summaries print it (6 significant digits)."""
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def print_plan(plan: Plan, console: Console) -> None:
    """The privacy plan as a table (dry run, and the top of every release summary)."""
    privacy = plan.privacy
    cost = privacy.cost
    console.print(
        f"[bold]{privacy.command}[/bold] privacy plan: {len(privacy.events)} mechanism(s), "
        f"total ε = {fmt(cost.epsilon)}, δ = {fmt(cost.delta)}, "
        f"guarantee: {privacy.guarantee if privacy.dp_guarantee else 'NONE (uncertified)'}; "
        f"{plan.n_rows} rows; neighbours: {privacy.neighbouring.get('relation')} "
        f"{privacy.neighbouring.get('unit', '')}"
    )
    table = Table(show_header=True, header_style="bold")
    for col in ("stage", "mechanism", "ε", "δ", "sensitivity", "noise scale"):
        table.add_column(col, overflow="fold")  # a narrow terminal wraps names, never cuts them
    for ev in privacy.events:
        objective = ev.params.get("perturbation") == "objective"  # b in the objective, not output
        table.add_row(ev.stage, f"objective ({ev.kind})" if objective else ev.kind,
                      fmt(ev.epsilon), fmt(ev.delta),
                      f"{fmt(ev.sensitivity)} ({ev.norm})", fmt(ev.noise_scale))
    console.print(table)
    print_accuracy(plan, console)
    for key, val in privacy.details.items():
        if not isinstance(val, dict | list):
            console.print(f"  {key}: {fmt(val)}", markup=False)
    prep = privacy.assumptions.get("preprocessing")
    if isinstance(prep, dict):
        print_preprocessing(prep, console)
    state = plan.ledger
    if state is not None:
        console.print(
            f"ledger '{state.dataset}': spent ε={fmt(state.spent.epsilon)} δ={fmt(state.spent.delta)}"
            f" → after this run ε={fmt(state.after.epsilon)} δ={fmt(state.after.delta)}"
            f" (cap ε={fmt(state.cap.epsilon)} δ={fmt(state.cap.delta)};"
            f" {state.accountant.name} composition)",
            markup=False,
        )
    else:
        console.print("ledger: none (the run is receipted but not capped)")


def print_accuracy(plan: Plan, console: Console) -> None:
    """The predicted half-widths (DESIGN principle 9) and a ``target_halfwidth`` report."""
    acc = plan.privacy.accuracy
    if acc:
        levels = sorted({f"{(1 - a.alpha) * 100:g}%" for a in acc})
        console.print(f"predicted accuracy ({', '.join(levels)} intervals from public inputs; "
                      "noise = the privacy noise alone, bound = a guaranteed upper bound; "
                      "* = headline):")
        table = Table(show_header=True, header_style="bold")
        for col in ("quantity", "± half-width", "units", "kind", "law"):
            table.add_column(col, overflow="fold")
        for a in acc:
            table.add_row(*(escape(c) for c in (
                a.quantity + (" *" if a.headline else ""), fmt(a.halfwidth), a.units,
                a.kind + (" (bound)" if a.bound else ""), a.law)))
        console.print(table)
    if plan.target is not None:
        for line in plan.target.lines():
            console.print(line, markup=False)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The human summary: scalars as they are, released numbers with their interval (the
    convention of :mod:`dpcausal.intervals`), one level deep; other lists and objects are left
    to ``--json``."""
    from dpcausal.intervals import summary_interval

    def is_record(v: Any) -> bool:
        return isinstance(v, dict) and "estimate" in v

    lines = []
    for key, val in summary.items():
        if is_record(val):
            lines.append(f"  {key}: {summary_interval(val)}")
        elif isinstance(val, dict) and val and all(is_record(v) for v in val.values()):
            lines.append(f"  {key}:")
            lines += [f"    {k}: {summary_interval(v)}" for k, v in val.items()]
        elif not isinstance(val, dict | list):
            lines.append(f"  {key}: {fmt(val)}")
    return lines


def text(draw: Any, width: int = 120) -> str:
    """What ``draw(console)`` prints, as plain text (no colour), ``width`` columns wide."""
    console = Console(width=width, record=True, color_system=None, force_terminal=False,
                      highlight=False, soft_wrap=True, file=io.StringIO())
    draw(console)
    return console.export_text()


def print_preprocessing(doc: dict[str, Any], console: Console) -> None:
    """The declared preprocessing: each model column, its public bound and its rule."""
    cols = doc["model_columns"]
    console.print(f"preprocessing (declared, row by row): {len(doc['covariates'])} covariate(s) "
                  f"→ {len(cols)} model column(s)", markup=False)
    for m in cols:
        bound = f"[{fmt(m['bounds'][0])}, {fmt(m['bounds'][1])}]" if m["bounds"] else "no bound"
        console.print(f"  {m['name']} in {bound}: {m['rule']}", markup=False)
