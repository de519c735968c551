"""two-stage's private outcome centre (``outcome_center: private``, the default; issue 17).

The stage-2 target t = 2(y − c)ã needs a centre c near the mean outcome: in the population c does
not change the IPW target, but in a sample the term −2c·Σwãx/n adds variance that grows with
|c − ȳ| and no ε removes. A public centre must be guessed; the bounds' midpoint is far from the
mean of a skewed outcome (earnings in [0, 60,000] with mean ≈ 5,000), and then the rule depends on
where the public upper bound sits. So the default releases the centre privately:

    c̃ = clamp(fl(Σ_i clip(y_i, L, U))/n + Lap(Δ_c/ε_c), L, U),   ε_c = share·ε,

and stage 2 works on y − c̃ winsorised at ±(U − L)/2 with ε₂ = ε − ε_c.

Notes
-----
Neighbouring relation: replace one row (one individual); n is public (stage 2's relation).

Sensitivity of the centre: every clipped outcome lies in [L, U], so replacing one row moves the
exact mean Σy_i/n by at most (U − L)/n. The computed mean adds rounding: the rows are summed in
blocks of ≤ SUM_CHUNK and the partial sums added exactly rounded (:func:`dpcausal.numerics.
block_total`; on an engine the per-batch totals too), so the computed sum errs by ≤ γ_K·Σ|y_i| ≤
γ_K·n·B (K = SUM_TERMS, B = max(|L|, |U|)), and the division by n adds one rounding: the computed
mean is within γ_{K+1}·B of the exact one on every data set. Hence
Δ_c = (U − L)/n + 2·SAFETY·γ_{K+1}·B bounds the change of the computed mean between neighbours.

Guarantee of the centre: Laplace noise of scale Δ_c/ε_c makes the unclamped c̃ ε_c-DP (pure);
clamping to the public [L, U] is post-processing.

Guarantee of the composed release (c̃, θ): for every FIXED centre c, stage 2 on the targets
t_i = 2·clip(y_i − c, ±(U − L)/2)·ã_i satisfies |t_i| ≤ 2M_y with M_y = (U − L)/2 (the clip is
exact in floating point), and the weights do not read y; so the gradient-map shift bound
ζ·W̄₁ˢ, ζ = 2M_x(2M_y + M_∞λ₁), and the Jacobian bound of
:func:`dpcausal.commands.two_stage.privacy.mechanism` hold unchanged, and θ̃ = M₂(D; c) is
ε₂-DP (Gamma noise) or (ε₂, δ)-DP (Gaussian) for that c. λ₁, γ and the noise scale are computed
from public inputs (M_y does not depend on c). The released pair is M(D) = (c̃, M₂(D; c̃)) with
c̃ = M₁(D) ε_c-DP: by adaptive sequential composition (Dwork & Roth 2014, Thm 3.16 with the
adaptive form of §3.5: the second mechanism may take the first one's output as input) M is
(ε_c + ε₂, δ)-DP = (ε, δ)-DP. Written out for the pure case: for any measurable S,
P(M(D) ∈ S) = ∫ P(M₂(D; c) ∈ S_c) dP_{M₁(D)}(c) ≤ ∫ e^{ε₂} P(M₂(D′; c) ∈ S_c) e^{ε_c} dP_{M₁(D′)}(c)
= e^{ε} P(M(D′) ∈ S), since M₁'s density ratio is ≤ e^{ε_c} pointwise. The same c̃ enters both
neighbours' stage 2 in this argument, which is why the audit conditions on the centre
(:mod:`dpcausal.commands.two_stage.audit`). docs/proofs/two_stage.md §11 has the proof in full.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import PredictedAccuracy
from dpcausal.commands.two_stage.setup import TwoStageSetup, with_center
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.intervals import interval_record
from dpcausal.mechanisms import LaplaceMechanism, NoiseGuard
from dpcausal.mechanisms.noise_law import laplace_halfwidth
from dpcausal.numerics import SAFETY, SUM_TERMS, block_total, gamma

FloatArray = npt.NDArray[np.float64]
STAGE = "two_stage.outcome_center"
"""The centre's event in the plan, the receipt and the noise guard."""


def is_private(spec: TwoStageSpec) -> bool:
    """Whether the spec releases the outcome centre privately (``outcome_center: private``)."""
    return spec.two_stage.outcome_center == "private"


def epsilons(spec: TwoStageSpec) -> tuple[float, float]:
    """(ε_c, ε₂): the centre's share of privacy.epsilon (0 without a private centre) and the rest,
    which stage 2's calibration splits between its noise and Jacobian terms."""
    eps = spec.privacy.epsilon
    if not is_private(spec):
        return 0.0, eps
    eps_c = spec.two_stage.center_share * eps
    return eps_c, eps - eps_c


def sensitivity(setup: TwoStageSetup, n: int) -> float:
    """Δ_c = (U − L)/n + 2·SAFETY·γ_{K+1}·max(|L|, |U|) (module Notes)."""
    big = max(abs(setup.lower), abs(setup.upper))
    return (setup.upper - setup.lower) / n + 2.0 * SAFETY * gamma(SUM_TERMS + 1) * big


def mechanism(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> LaplaceMechanism:
    """The centre's Laplace mechanism (ε_c, Δ_c), from public inputs only."""
    return LaplaceMechanism(epsilons(spec)[0], sensitivity(setup, n), stage=STAGE)


def outcome_sum(y: FloatArray) -> float:
    """Σ y over rows already clipped to [L, U], in blocks added exactly rounded (module Notes)."""
    return float(block_total(lambda rows: float(np.sum(y[rows])), len(y)))


def release(spec: TwoStageSpec, setup: TwoStageSetup, total: float, n: int, *,
            noise: NoiseGuard) -> TwoStageSetup:
    """Draw c̃ = clamp(total/n + Lap, L, U) through the guard; the setup with that centre."""
    raw = float(noise.release(mechanism(spec, setup, n), np.array([total / n]))[0])
    return with_center(setup, min(max(raw, setup.lower), setup.upper), unclamped=raw)


def halfwidth(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> float:
    """The centre's (1 − α) noise half-width (exact Laplace quantile)."""
    return laplace_halfwidth(mechanism(spec, setup, n).scale, spec.accuracy.alpha)


def _law(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> str:
    return f"Laplace(b={mechanism(spec, setup, n).scale:.4g}), clamped to bounds.outcome"


def accuracy(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> PredictedAccuracy:
    """The plan's predicted half-width of the released centre (outcome units)."""
    return PredictedAccuracy("outcome_center", "outcome units", halfwidth(spec, setup, n),
                             spec.accuracy.alpha, "noise", _law(spec, setup, n), False, False,
                             True, "")


def document(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> dict[str, Any]:
    """The rule file's ``outcome_center``: the released c̃ (outcome units and direction) with its
    noise interval, or the public centre (post-processing of released and public values only)."""
    sign = -1.0 if spec.two_stage.outcome_direction == "lower" else 1.0
    if not setup.private_center:
        source = "midpoint" if spec.two_stage.outcome_center == "midpoint" else "public"
        return {"estimate": sign * setup.center, "source": source}
    lo, hi = sorted((sign * setup.lower, sign * setup.upper))
    rec = interval_record(sign * setup.center_unclamped, halfwidth(spec, setup, n),
                          alpha=spec.accuracy.alpha, law=_law(spec, setup, n), bounds=(lo, hi))
    rec["source"] = "private"
    rec["winsorised_at"] = setup.half_range
    return rec
