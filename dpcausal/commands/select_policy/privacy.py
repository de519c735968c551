"""select-policy's privacy mechanisms (the choice, and the optional value release) and its
neighbouring relation."""

from __future__ import annotations

from typing import Any

from dpcausal.commands.common import row_split
from dpcausal.commands.select_policy.setup import STAGE_CHOICE, STAGE_VALUE, Setup
from dpcausal.mechanisms import ExponentialMechanism, LaplaceMechanism
from dpcausal.spec.split import RowSplit


def choice_mechanism(setup: Setup, epsilon: float) -> ExponentialMechanism:
    """The exponential mechanism over the library, P(π) ∝ exp(ε U(π) / (2Δ)).

    Notes
    -----
    Neighbouring relation: replace one record of the data file; N, m, n are public. The default
    split is a secret random permutation, so the guarantee holds for multisets (the coupling of
    :mod:`dpcausal.commands.common.row_split` keeps the replaced record in its block); a
    ``seeded`` or ``index`` split is a function of the row position and assumes the row order is
    independent of the data. Regime ``frozen``: the nuisance model is a fixed public input — only the rows of
    the data file (the scoring block) are protected, not the records it was fit on.
    Sensitivity: ``learned``: Δ_cert = max{2B_ψ, n ρ*} (paper Lemma 1 + Lemma 2 + Prop. 2; see
    :class:`dpcausal.learners.SpilloverCertificate`); ``frozen``: 2B_ψ (one summand moves, Prop. 1);
    ``fixed``: 2B for scores clipped to [−B, B].
    Guarantee: pure ε-DP (McSherry & Talwar 2007; paper Thm 2) for the released policy identity.
    """
    return ExponentialMechanism(epsilon, setup.utility_sensitivity, stage=STAGE_CHOICE)


def value_mechanism(setup: Setup, epsilon: float) -> LaplaceMechanism:
    """Laplace noise on V̂(π̂) = U(π̂)/n, a separate step with its own ε.

    Notes
    -----
    Neighbouring relation: as for :func:`choice_mechanism`.
    Sensitivity: for every fixed π, |U_D(π) − U_D′(π)| ≤ Δ, so V̂ = U/n moves by ≤ Δ/n; the chosen
    π̂ is a released (ε-DP) output, so the value step composes sequentially with the choice.
    Guarantee: pure ε₂-DP; total ε + ε₂ by basic composition.
    """
    return LaplaceMechanism(epsilon, setup.utility_sensitivity / setup.n, stage=STAGE_VALUE)


def neighbouring(setup: Setup, split: RowSplit) -> dict[str, Any]:
    """The receipt's neighbouring relation and protected set."""
    protected = {
        "learned": "every row: the nuisance block D_tr and the scoring block D_sc",
        "frozen": ("the rows of the data file (the scoring block) only; records used to fit the "
                   "frozen nuisance model are NOT protected"),
        "fixed": ("every row, given that each row's score columns are a function of that row "
                  "alone, fixed before the data was seen (user-asserted)"),
    }[setup.regime]
    out = {"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
           "detail": ("bounded/substitution: replace one record; N, m, n are public; the replaced "
                      "record stays in its block; not add/remove"),
           "protected": protected}
    if setup.regime == "learned":
        out["row_order"] = row_split.row_order(split)
    return out
