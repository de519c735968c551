"""synth-control's public setup: the neighbouring relation, the side file holding the panel's
structure and the checks made before any value is read."""

from __future__ import annotations

from dpcausal.commands.synth_control import ridge_penalty
from dpcausal.commands.synth_control.panel import structure_columns
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import SpecError, UncertifiedModeError
from dpcausal.method import SideInput

COMMAND = "synth-control"
PAPER = "Rho, Cummings & Misra (AISTATS 2023), Differentially Private Synthetic Control"
NEIGHBOURING = {
    "relation": "replace-one donor",
    "unit": "one donor unit's whole series (all T periods, pre and post)",
    "n_public": True,
    "public": "target series, unit ids, donor count n, periods T and T0, treatment time, bounds",
}
INDIVIDUAL = {
    "relation": "change one person's data in one donor unit",
    "unit": "one person in a donor unit, whose data moves each of that unit's cells by at most "
            "individual.contribution / individual.population",
    "n_public": True,
    "public": "target series, unit ids, donor count n, periods T and T0, treatment time, bounds, "
              "the contribution bound and the minimum cell population",
    "weaker_than": "privacy_unit: donor — this hides one person, not a whole donor's series; a "
                   "donor unit's aggregate pattern is not protected",
}


def neighbouring(spec: SynthControlSpec) -> dict[str, object]:
    """The receipt's neighbouring relation for this spec's privacy unit."""
    individual = spec.synth_control.privacy_unit == "individual"
    return dict(INDIVIDUAL if individual else NEIGHBOURING)


def side_inputs(spec: SynthControlSpec) -> dict[str, SideInput]:
    """The panel's public structure: the unit and time columns of the data file (no outcome).

    Read before the plan, also by ``--dry-run``: the donor count n, T and T0 are public under the
    neighbouring relation (spec §1.3), and the plan's noise scales depend on them. Read as an
    Arrow table: the plan needs no pandas (issue 24).
    """
    assert spec.data.path is not None
    return {"panel": SideInput(spec.data.path, structure_columns(spec),
                               "panel structure (unit and time columns of the data file)",
                               kind="arrow")}


def check_lambda(lam: float, n: int, t0: int) -> None:
    """Refuse, before any value is read, a λ so small that the Cholesky solve of the ridge
    (X_preX_preᵀ + (λ/2)I, entries of X in [−1, 1], norm ≤ nT0) could fail on the data: a failed
    factorisation would be an exit that depends on the data (issue #13)."""
    if not ridge_penalty.is_safe(lam, n, t0):
        raise SpecError(f"synth_control.lambda: {lam:g} is too small for a float64 ridge solve on "
                        f"{n} donors and {t0} pre-periods that cannot fail; raise it (or use the "
                        "default rule, total)")


def check_mode(spec: SynthControlSpec) -> None:
    sec = spec.synth_control
    if sec.method == "obj" and not sec.allow_uncertified:
        raise UncertifiedModeError(
            "synth_control.method: obj (DPSC_obj, objective perturbation) is NOT differentially "
            "private as published: its privacy loss is unbounded in the output (spec §4.6). Use "
            "method: out (the certified default), or set synth_control.allow_uncertified: true to "
            "reproduce the paper with a receipt that says dp_guarantee: false"
        )
    if spec.privacy.delta != 0.0 and sec.method != "capped":
        raise SpecError("privacy.delta: DPSC is pure ε-DP (δ = 0); set privacy.delta to 0 (δ > 0 "
                        "is used only by method: capped, for a Gaussian path)")
