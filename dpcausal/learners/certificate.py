"""The spillover certificate Δ_cert = max{2B_ψ, n·ρ*} of certified DR-score policy selection."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SpilloverCertificate:
    """Every public constant of the sensitivity of U(π) = Σ_{scoring block} ψ_π(Z; η̂(D_tr)).

    Notes
    -----
    Neighbouring relation: replace one record of D = (D_tr, D_sc); the record stays in its block and
    N, m, n are public.
    Sensitivity (spec select_policy §2.4–2.6, paper Lemma 1, Lemma 2, Thm 2): a scoring-block
    replacement changes one summand, |ψ| ≤ B_ψ = B_μ + R_{Y,μ}/ζ, so by ≤ 2B_ψ; a training-block
    replacement moves μ̂ by ≤ β_μ and ê by ≤ β_e in sup norm, hence every one of the n summands by
    ≤ ρ* = (1 + 1/ζ)β_μ + ζ⁻² R_{Y,μ} β_e (Lemma 2). One record is replaced, so Δ = max of the two.
    """

    d: int
    m: int
    n: int
    zeta: float
    y_bounds: tuple[float, float]
    mu_bounds: tuple[float, float]
    B_mu: float
    R_Y_mu: float
    B_psi: float
    beta_mu: float
    beta_e: float
    rho_star: float
    floor_2Bpsi: float
    n_rho_star: float
    delta_cert: float
    certificate_type: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form for receipts."""
        out = asdict(self)
        out["y_bounds"] = list(self.y_bounds)
        out["mu_bounds"] = list(self.mu_bounds)
        return out


def score_bounds(zeta: float, y_bounds: tuple[float, float],
                 mu_bounds: tuple[float, float]) -> tuple[float, float, float]:
    """(B_μ, R_{Y,μ}, B_ψ) of Assumption 1 (spec §1.2)."""
    y_lo, y_hi = y_bounds
    mu_lo, mu_hi = mu_bounds
    b_mu = max(abs(mu_lo), abs(mu_hi))
    r = max(abs(y_hi - mu_lo), abs(y_lo - mu_hi))
    return b_mu, r, b_mu + r / zeta


def certify_spillover(*, d: int, m: int, n: int, zeta: float, y_bounds: tuple[float, float],
                      mu_bounds: tuple[float, float], beta_mu: float, beta_e: float,
                      certificate_type: str = "erm") -> SpilloverCertificate:
    """Return ρ* and Δ_cert = max{2B_ψ, n ρ*} from public β's (paper eq. (9))."""
    if not 0.0 < zeta <= 0.5:
        raise ValueError(f"zeta must be in (0, 0.5], got {zeta!r}")
    if m < 1 or n < 1:
        raise ValueError("m and n must be >= 1")
    b_mu, r, b_psi = score_bounds(zeta, y_bounds, mu_bounds)
    rho = (1.0 + 1.0 / zeta) * beta_mu + r * beta_e / zeta**2
    floor = 2.0 * b_psi
    n_rho = n * rho
    if certificate_type == "trivial":
        # §2.5 tightening: a summand never moves by more than 2B_ψ
        n_rho = n * min(rho, floor)
    delta = max(floor, n_rho)
    if not math.isfinite(delta):
        raise ValueError("the certificate is not finite")
    return SpilloverCertificate(d, m, n, zeta, tuple(y_bounds), tuple(mu_bounds),  # type: ignore[arg-type]
                                b_mu, r, b_psi, beta_mu, beta_e, rho, floor, n_rho, delta,
                                certificate_type)
