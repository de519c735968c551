"""owl's privacy plan, from the spec, the public row count and the public tuning file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.common import row_split
from dpcausal.commands.owl import auto
from dpcausal.commands.owl.penalty import (
    KAPPA,
    choose_lambda,
    gamma_of,
    shrinkage,
    shrinkage_warning,
)
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import rule_noise
from dpcausal.commands.owl.setup import OwlSetup, build_setup
from dpcausal.commands.owl.spec import OwlSpec, PropensityColumn
from dpcausal.commands.owl.tune import tune_gamma
from dpcausal.errors import SpecError

if TYPE_CHECKING:
    import pandas as pd


def plan(spec: OwlSpec, n_rows: int, side: dict[str, pd.DataFrame], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build owl's plan from the spec, the public n and public side files (γ tuning)."""
    if spec.privacy.delta != 0.0:
        raise SpecError("privacy.delta: owl is pure ε-DP (δ = 0); set privacy.delta to 0")
    setup = build_setup(spec)
    if spec.owl.ridge_lambda == "auto":
        return auto_plan_of(spec, setup, n_rows)
    gamma_source: dict[str, Any]
    if spec.owl.tune is not None:
        tuned = tune_gamma(spec, setup, side["tune"], n=n_rows, epsilon=spec.privacy.epsilon)
        gamma = tuned["gamma"]
        gamma_source = {"source": "owl-tune (Algorithm 2 on public data)", **tuned}
    elif spec.owl.gamma is not None:
        gamma = spec.owl.gamma
        gamma_source = {"source": "spec (gamma, in outcome units × rows)"}
    elif spec.owl.ridge_lambda in (None, "total"):
        want = spec.accuracy
        limit = (want.max_halfwidth if want.max_halfwidth is not None
                 and want.quantity in (None, "margin") else KAPPA)
        choice = choose_lambda(setup, n=n_rows, epsilon=spec.privacy.epsilon,
                               alpha=want.alpha, kappa=min(KAPPA, limit))
        gamma = gamma_of(choice.lam, n_rows, setup)
        gamma_source = {"source": "total-error rule (lambda: total)", **choice.to_dict()}
    else:
        gamma = gamma_of(float(spec.owl.ridge_lambda), n_rows, setup)
        gamma_source = {"source": "spec (lambda, unit-free)"}
    lam = gamma / (n_rows * setup.weight_bound)
    mech = mechanism(setup, gamma, spec.privacy.epsilon, n_rows)
    acc = setup.accuracy(gamma, n_rows)
    event = mech.event()
    params = {**event.params, "gamma": gamma, "weight_bound_W": setup.weight_bound, "C": 0.0,
              "solver_grad_tol": acc.stop_tol, "solver_distance_bound": acc.distance,
              "solver_fallback_steps": acc.fallback_steps, "huber_h": setup.loss.h}
    event = type(event)(**{**event.to_dict(), "params": params})
    return PrivacyPlan(
        command="owl",
        accuracy=rule_noise(event, spec.accuracy.alpha).accuracy(setup.fmap, n_search=False),
        events=(event,),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True},
        guarantee="pure",
        dp_guarantee=True,
        assumptions=assumptions(spec, setup),
        details={"gamma": gamma, "lambda": lam, "gamma_source": gamma_source,
                 **({"warning_shrinkage": warn} if (warn := shrinkage_warning(lam)) else {}),
                 "shrinkage_proxy": shrinkage(lam), "dim": setup.fmap.dim,
                 "kernel": setup.fmap.kernel, "n_rows": n_rows,
                 "expected_noise_norm": mech.expected_norm},
    )


def auto_plan_of(spec: OwlSpec, setup: OwlSetup, n_rows: int) -> PrivacyPlan:
    """The plan of ``lambda: auto`` (:mod:`dpcausal.commands.owl.auto`): k trials on the training
    part, the selection on the validation part, the release of λ*·θ̂ on all rows."""
    if spec.engine is not None:
        raise SpecError("owl.lambda: auto runs in memory only; give lambda (a number or total) "
                        "to run on an engine, or remove the engine section and --engine",
                        field="owl.lambda")
    row_split.refuse_on_engine(auto.settings(spec).split, spec.engine, "owl.auto.split")
    ap = auto.auto_plan(spec, setup, n_rows)
    evs = auto.events(setup, ap)
    final = evs[-1]
    noise = rule_noise(final, spec.accuracy.alpha)
    halfwidths = {f"{lam:g}": noise.margin_halfwidth_max(setup.fmap.dim) / lam
                  for lam in ap.grid}
    return PrivacyPlan(
        command="owl",
        accuracy=noise.accuracy(setup.fmap, n_search=False),
        events=tuple(evs),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
                      "row_order": row_split.row_order(auto.settings(spec).split),
                      "composition": "the trials (training part) and the selection (validation "
                                     "part) read disjoint parts of a data-independent split: "
                                     "share·ε for both; the release adds (1 − share)·ε"},
        guarantee="pure",
        dp_guarantee=True,
        assumptions={**assumptions(spec, setup), "split": auto.settings(spec).split.receipt()},
        details={"gamma": None, "lambda": "auto", "gamma_source": {
            "source": "lambda: auto (private selection on the sensitive rows)",
            "grid": list(ap.grid), "share_of_epsilon": auto.settings(spec).share,
            "epsilon_selection": ap.eps_select, "epsilon_release": ap.eps_fit,
            "rows_training": ap.n_train, "rows_validation": ap.n_valid},
            "released_theta": "lambda* x theta_hat(lambda*): the rule at the selected lambda*, "
                              "scaled so that its noise does not depend on lambda*",
            "margin_halfwidth_of_theta_hat_by_lambda": halfwidths,
            "dim": setup.fmap.dim, "kernel": setup.fmap.kernel, "n_rows": n_rows,
            "expected_noise_norm": final.noise_scale * setup.fmap.dim},
    )


def assumptions(spec: OwlSpec, setup: OwlSetup) -> dict[str, Any]:
    """The public bounds and constants the sensitivities rely on."""
    sec = spec.owl
    propensity = (
        {"column": sec.propensity.column, "floor": sec.propensity.floor}
        if isinstance(sec.propensity, PropensityColumn) else sec.propensity
    )
    return {
        "outcome_bounds": list(spec.bounds.outcome or ()),
        "outcome_direction": sec.outcome_direction,
        "covariate_bounds": setup.fmap.to_dict()["bounds"],
        "propensity": propensity,
        "propensity_source": "design (known, not estimated on the data)",
        "eta": setup.eta,
        "pi_min": setup.pi_min,
        "weight_bound_W": setup.weight_bound,
        "one_row_per_individual": True,
    }
