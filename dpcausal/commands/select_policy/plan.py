"""select-policy's privacy plan, from the spec, the public row count and the public library/model
files."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.common import row_split
from dpcausal.commands.select_policy import multi_arm
from dpcausal.commands.select_policy.accuracy import predicted, shrinkage
from dpcausal.commands.select_policy.privacy import choice_mechanism, neighbouring, value_mechanism
from dpcausal.commands.select_policy.scores import frozen_nuisance
from dpcausal.commands.select_policy.setup import NuisanceInputs, ScoreInputs, build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySection, SelectPolicySpec
from dpcausal.errors import SpecError


def _with_params(event: PrivacyEvent, extra: dict[str, Any]) -> PrivacyEvent:
    return PrivacyEvent(**{**event.to_dict(), "params": {**event.params, **extra}})


def actions(sec: SelectPolicySection) -> dict[str, Any]:
    """The declared arms, as the receipt and the released document name them."""
    if sec.arms is None:
        return {"treated": sec.treated, "control": sec.control_label()}
    return {"arms": list(sec.labels()), "K": len(sec.labels()),
            "experimental_multi_arm": True, "status": multi_arm.STATUS}


def plan(spec: SelectPolicySpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec, the public row count and the public library/model files."""
    if spec.privacy.delta != 0.0:
        raise SpecError("privacy.delta: select-policy is pure ε-DP (δ = 0); set privacy.delta to 0")
    sec = spec.select_policy
    setup = build_setup(spec, n_rows, side)
    if setup.regime == "learned":
        row_split.refuse_on_engine(sec.split, spec.engine, "select_policy.split")
    inputs = setup.inputs
    if setup.regime == "frozen" and isinstance(inputs, NuisanceInputs):
        frozen_nuisance(side["frozen_model"], inputs.fmap, mu_bounds=inputs.mu_bounds,
                        zeta=sec.zeta, path=sec.frozen_model, sign=inputs.sign)
    eps = spec.privacy.epsilon
    cert = setup.certificate.to_dict() if setup.certificate else None
    common = {"regime": setup.regime, "utility": "sum_DR_AIPW_over_scoring_block"
              if setup.regime != "fixed" else "sum_fixed_scores", "N": n_rows, "m": setup.m,
              "n": setup.n, "M": setup.library.size, "K": len(sec.labels())}
    events = [_with_params(choice_mechanism(setup, eps).event(),
                           {**common, "certificate": cert,
                            "library_sha256": setup.library.sha256})]
    if sec.value_release is not None:
        events.append(_with_params(value_mechanism(setup, sec.value_release.epsilon).event(),
                                   {"released": "DR value estimate of the chosen policy, U/n",
                                    "n": setup.n}))
    beta = sec.regret_beta
    regret_term = (2.0 * setup.utility_sensitivity
                   * (math.log(setup.library.size) + math.log(1.0 / beta)) / (setup.n * eps))
    details: dict[str, Any] = {
        "regime": setup.regime, "delta_cert": setup.utility_sensitivity, "N": n_rows, "m": setup.m,
        "n": setup.n, "M": setup.library.size, "library_sha256": setup.library.sha256,
        "regret_privacy_term": regret_term, "regret_beta": beta,
        "split": sec.split.kind if setup.regime == "learned" else "none (all rows score)",
    }
    if setup.certificate is not None:
        c = setup.certificate
        details.update({"B_psi": c.B_psi, "floor_2Bpsi": c.floor_2Bpsi, "beta_mu": c.beta_mu,
                        "beta_e": c.beta_e, "rho_star": c.rho_star, "n_rho_star": c.n_rho_star,
                        "certificate_type": c.certificate_type})
    details["library_source"] = setup.library.source
    shrink = shrinkage(setup)
    if shrink:
        details["nuisance_penalties"] = {k: v for k, v in shrink.items() if k != "warning"}
        if "warning" in shrink:
            details["warning_shrinkage"] = shrink["warning"]
    if setup.penalty is not None:
        details["penalty_rule"] = setup.penalty.to_dict()
    assumptions: dict[str, Any] = {"library": {"sha256": setup.library.sha256,
                                               "size": setup.library.size,
                                               **setup.library.source},
                                   "actions": actions(sec)}
    if isinstance(inputs, ScoreInputs):
        assumptions["fixed_scores"] = {"treated": inputs.treated, "control": inputs.control,
                                       "bound": inputs.bound}
    else:
        assumptions.update({
            # as declared (the run works on the negated ones for outcome_direction lower)
            "outcome_bounds": list(spec.bounds.outcome or ()),
            "mu_bounds": list(sec.mu_bounds or spec.bounds.outcome or ()),
            "outcome_direction": sec.outcome_direction,
            "zeta": sec.zeta, "covariates": inputs.fmap.to_dict(),
            "feature_schema_sha256": hashlib.sha256(json.dumps(
                inputs.fmap.to_dict(), sort_keys=True).encode()).hexdigest(),
            "learners": setup.learners,
            "split": ({**sec.split.receipt(), "train_fraction": sec.train_fraction,
                       "m": setup.m, "n": setup.n} if setup.regime == "learned" else None),
        })
        if setup.regime == "frozen":
            assumptions["frozen_model"] = str(sec.frozen_model)
    value_eps = sec.value_release.epsilon if sec.value_release is not None else None
    return PrivacyPlan(command="select-policy", events=tuple(events),
                       accuracy=predicted(setup, epsilon=eps, alpha=spec.accuracy.alpha,
                                          value_epsilon=value_eps),
                       neighbouring=neighbouring(setup, sec.split), guarantee="pure", dp_guarantee=True,
                       assumptions=assumptions, details=details)
