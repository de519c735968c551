"""two-stage's unit-free ℓ₁ radius and the public rule that picks it (``l1_scale: total``, the
default), with the dry run's shrinkage proxies (issue 17).

**Unit-free radius.** The stage-2 target t = 2(y − c)ã carries the outcome's units, so a radius
λ₁ given in those units (``l1_radius``, the old form) means a different ball on a dollar and on a
thousand-dollar outcome. ``l1_scale`` r gives it relative to the target's own bound instead:

    λ₁ = r · 2M_y / M_∞,

the ball whose largest score |v(x)ᵀθ| = M_∞‖θ‖₁ on the covariate box is r times the largest
target |t| = 2M_y. Then ζ = 2M_x(2M_y + M_∞λ₁) = 4M_xM_y(1 + r): the noise b, the target and
the ball all scale with M_y, so θ scales with it and rescaling the outcome and its bounds
($ ↔ k$) leaves the rule's law unchanged (θ/M_y has the same law). r = 1 never needs a score above
the target's bound, at twice the noise floor of r → 0.

**The default rule.** The ball also denoises: a smaller ball keeps only the largest coordinates
of the noisy gradient (lasso-like), at the cost of bending the rule when the noise is small. So r
grows with how small the predicted noise is:

    r = clip(κ/ν₀, r_min, 1),   ν₀ = E‖b₀‖ / (n(γ + I)) / (2M_y),   κ = 0.05,

ν₀ the plan's expected noise norm of θ in target units at the floor ζ₀ = 4M_xM_y (r → 0), with
the ridge γ the plan uses and I = 2/(3d) a public proxy for the data's curvature (the weighted
second moment of the unit feature rows, each coordinate uniform on its box: E x_j² = 1/(3d),
times the objective's 2). ν₀ is unit-free and reads only n, ε, δ, d, the weights' public
stability bounds and α-free expectations; it costs no ε. As nε → ∞, ν₀ → 0 and r = 1 (the
non-private weighted regression up to the score bound). κ is calibrated, not derived: on the
paper's linear design (configs/two_stage.yaml's data) a sweep of r at ε = 1, 5, 20, 10⁹ peaks
near κ/ν₀ (benchmarks/RESULTS.md, "two-stage defaults").

**Shrinkage proxies.** The dry run states γ/(γ + I), the share of the data's curvature the ridge
replaces (above ½ the rule leans towards the weighted mean-difference direction Σwtx instead of
the regression's H⁻¹Σwtx), and r (scores capped at r times the target bound), and warns when
either bends the rule by more than half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpcausal.commands.two_stage.calibration import StabilityBounds, calibrate

KAPPA = 0.05
"""κ: the predicted relative noise ν₀ at which the rule's r reaches 1 (module docstring)."""
SCALE_RANGE = (0.05, 1.0)
"""r is clipped to this range."""
SHRINK_WARN = 0.5
"""Above this ridge share (or below this r) the dry run warns."""
RULE = ("r = clip(κ/ν₀, 0.05, 1), κ = 0.05, ν₀ = E‖b₀‖/(n(γ + I))/(2M_y) at ζ₀ = 4M_xM_y, "
        "I = 2/(3d); λ₁ = r·2M_y/M_∞")


def curvature(dim: int) -> float:
    """I = 2/(3d): public proxy for the curvature (2/n)Σwxxᵀ of unit feature rows."""
    return 2.0 / (3.0 * dim)


def radius_of(scale: float, m_y: float, m_inf: float) -> float:
    """λ₁ = r·2M_y/M_∞ (module docstring)."""
    return scale * 2.0 * m_y / m_inf


def scale_of(radius: float, m_y: float, m_inf: float) -> float:
    """r = M_∞λ₁/(2M_y): the radius as a share of the target bound."""
    return radius * m_inf / (2.0 * m_y)


@dataclass(frozen=True)
class RadiusChoice:
    """The ℓ₁ radius of one run and the public quantities it was chosen by."""

    radius: float
    scale: float
    source: str
    relative_noise: float | None
    ridge_share: float

    def to_dict(self) -> dict[str, Any]:
        """The plan's record."""
        out: dict[str, Any] = {"l1_radius": self.radius, "l1_scale": self.scale,
                               "source": self.source, "ridge_share": self.ridge_share}
        if self.relative_noise is not None:
            out["relative_noise_nu0"] = self.relative_noise
            out["rule"] = RULE
        return out

    def warning(self) -> str | None:
        """The dry run's shrinkage warning (None when neither proxy exceeds ½)."""
        parts = []
        if self.ridge_share > SHRINK_WARN:
            parts.append(f"the ridge γ replaces about {100 * self.ridge_share:.0f}% of the data's "
                         "curvature (public proxy), so the rule leans towards the weighted "
                         "mean-difference direction")
        if self.scale < SHRINK_WARN:
            parts.append(f"the ℓ₁ ball caps every score at {self.scale:.2g} of the target bound "
                         "2M_y, so only the strongest covariates enter the rule")
        if not parts:
            return None
        return "shrinkage: " + "; ".join(parts) + " (more ε or rows relax both)"


def choose_radius(*, explicit: float | None, scale: float | str, n: int, dim: int, m_x: float,
                  m_y: float, m_inf: float, epsilon: float, delta: float, eps_split: float,
                  noise: Any, bounds: StabilityBounds, mode: Any,
                  gamma: float | None) -> RadiusChoice:
    """λ₁ from the spec: ``explicit`` (l1_radius, outcome units), a given r, or the rule."""
    def share(g: float) -> float:
        return g / (g + curvature(dim))

    common = dict(n=n, dim=dim, m_x=m_x, m_inf=m_inf, m_y=m_y, epsilon=epsilon, delta=delta,
                  eps_split=eps_split, noise=noise, bounds=bounds, mode=mode)
    floor = calibrate(l1_radius=0.0, **common)
    g = floor.gamma_required if gamma is None else max(gamma, floor.gamma_required)
    if explicit is not None:
        return RadiusChoice(explicit, scale_of(explicit, m_y, m_inf), "two_stage.l1_radius",
                            None, share(g))
    if not isinstance(scale, str):
        return RadiusChoice(radius_of(scale, m_y, m_inf), scale, "two_stage.l1_scale", None,
                            share(g))
    nu0 = floor.expected_noise_norm / (n * (g + curvature(dim))) / (2.0 * m_y)
    r = SCALE_RANGE[1] if nu0 <= 0.0 else KAPPA / nu0
    r = min(max(r, SCALE_RANGE[0]), SCALE_RANGE[1])
    if not math.isfinite(r):
        r = SCALE_RANGE[0]
    return RadiusChoice(radius_of(r, m_y, m_inf), r, "two_stage.l1_scale: total", nu0, share(g))
