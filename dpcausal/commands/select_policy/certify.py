"""The learned regime's spillover certificate from its two certified learners, for two arms
(:mod:`~dpcausal.commands.select_policy.setup`) and K arms
(:mod:`~dpcausal.commands.select_policy.multi_arm`)."""

from __future__ import annotations

from typing import Any

from dpcausal.commands.select_policy.spec import SelectPolicySection
from dpcausal.errors import SpecError
from dpcausal.learners import CertifiedRidge, SpilloverCertificate, certify_spillover


def spillover(sec: SelectPolicySection, ridge: CertifiedRidge, propensity: Any, *, d: int, m: int,
              n: int, trivial_beta_e: float) -> SpilloverCertificate:
    """Δ_cert = max{2B_ψ, n ρ*} with the learners' β (``certificate: erm``) or the trivial
    β_μ = μ̄ − μ̲, β_e = ``trivial_beta_e`` (the widest propensity range); refuses (before any row
    is read) a penalty whose solve cannot be guaranteed in float64."""
    for name, problem in (("lambda_mu", ridge.problem(d)),
                          ("lambda_e", propensity.problem(m, d))):
        if problem is not None:  # public settings only: refused before any row is read
            raise SpecError(f"select_policy.{name}: {problem}; raise it")
    mu_bounds = ridge.mu_bounds
    if sec.certificate == "erm":
        beta_mu, beta_e = ridge.beta(m, d), propensity.beta(m, d)
    else:
        beta_mu, beta_e = mu_bounds[1] - mu_bounds[0], trivial_beta_e
    return certify_spillover(d=d, m=m, n=n, zeta=sec.zeta, y_bounds=ridge.y_bounds,
                             mu_bounds=mu_bounds, beta_mu=beta_mu, beta_e=beta_e,
                             certificate_type=sec.certificate)
