"""``method: capped``: the average of k donors near the target, with noise calibrated to each
released number (DESIGN §4, "Beyond the papers"; proofs in docs/proofs/synth_control_estimand.md).

The weights are a vertex of the capped simplex {w ≥ 0, Σw = 1, w ≤ c}, c = 1/k: weight 1/k on
each of k donors. Everything works in the outcome's own units (weights summing to 1 make the
estimator equivariant to any affine map of the outcome, so no [−1, 1] mapping is needed).

Every donor cell is clipped into a public interval I_t = [lo_t, hi_t]: the bounds [lo, hi], or,
with a band of half-width B, [max(lo, y_t − B), min(hi, y_t + B)] around the public target y.
Its width is at most ρ = min(hi − lo, 2B). One neighbour moves a clipped donor cell by at most
``cell_change`` (ρ for a replaced donor; min(contribution/population, ρ) for one person).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpcausal.mechanisms import (
    GaussianMechanism,
    LaplaceMechanism,
    SubsetExponentialMechanism,
    SubsetSelectionFamily,
)

FloatArray = npt.NDArray[np.float64]
Choice = Literal["nearest", "private"]
PathNoise = Literal["laplace", "gaussian"]

STAGE_CHOICE = "synth_control.donor_choice"
STAGE_AVERAGE = "synth_control.average_effect"
STAGE_PATH = "synth_control.path"
STAGE_FIT = "synth_control.pre_rmspe"
STAGE_PLACEBO_CHOICE = "synth_control.placebo_choice"
STAGE_PLACEBOS = "synth_control.placebo_effects"


@dataclass(frozen=True, slots=True)
class CappedScales:
    """The public quantities every sensitivity of ``method: capped`` derives from.

    Parameters
    ----------
    lo, hi
        bounds.outcome.
    band
        The band's half-width B in outcome units, or None (no band).
    k
        Donors averaged (cap c = 1/k).
    person_change
        ``privacy_unit: individual``: contribution/population, the most one person moves one of
        their unit's cells; None for ``privacy_unit: donor`` (a whole series is replaced).
    choice
        ``nearest`` (deterministic) or ``private`` (exponential mechanism).
    """

    lo: float
    hi: float
    band: float | None
    k: int
    person_change: float | None
    choice: Choice

    @property
    def width(self) -> float:
        """ρ = min(hi − lo, 2B): the widest interval I_t a clipped donor cell can lie in."""
        r = self.hi - self.lo
        return r if self.band is None else min(r, 2.0 * self.band)

    @property
    def reach(self) -> float:
        """The largest |x̃_t − y_t| of a clipped donor cell: min(hi − lo, B)."""
        r = self.hi - self.lo
        return r if self.band is None else min(r, self.band)

    @property
    def cell_change(self) -> float:
        """The most one neighbour moves one clipped donor cell."""
        if self.person_change is None:
            return self.width
        return min(self.person_change, self.width)

    @property
    def per_period(self) -> float:
        """s: the most one neighbour moves the counterfactual at one period (or any average of
        periods). ``nearest``: c·ρ (a donor may swap in or out of the k); ``private`` (the k are
        fixed by an earlier release): c·cell_change."""
        moved = self.width if self.choice == "nearest" else self.cell_change
        return moved / self.k

    @property
    def placebo_change(self) -> float:
        """The most one neighbour moves one donor cell clipped to the bounds (placebos use no
        band): hi − lo, or min(contribution/population, hi − lo)."""
        r = self.hi - self.lo
        return r if self.person_change is None else min(self.person_change, r)

    def placebo_l1(self, n: int) -> float:
        """ℓ1 sensitivity of the n placebo average effects (docs/proofs/synth_control_estimand.md
        §5): the changed donor's own placebo moves by ≤ change (+ hi − lo if its k nearest may
        all change: ``nearest``); every other placebo by ≤ (hi − lo)/k (``nearest``: one swap)
        or change/k (``private``: the sets are an earlier release)."""
        r, cc, k = self.hi - self.lo, self.placebo_change, self.placebo_k(n)
        if self.choice == "nearest":
            return cc + r + (n - 1) * r / k
        return cc * (1.0 + (n - 1) / k)

    def placebo_k(self, n: int) -> int:
        """Donors averaged by each placebo: k, at most the n − 1 others."""
        return min(self.k, n - 1)

    @property
    def utility_sensitivity(self) -> float:
        """Δ_u of the private choice: one donor's utility −d_j (RMS distance to the target over
        the pre-period) moves by at most min(cell_change, reach)."""
        return min(self.cell_change, self.reach)


def intervals(y: FloatArray, lo: float, hi: float, band: float | None
              ) -> tuple[FloatArray, FloatArray]:
    """Per-period I_t = [lo_t, hi_t]: the bounds, or their intersection with y_t ± B.

    y is clipped to [lo, hi] first, so lo_t ≤ y_t ≤ hi_t and I_t is never empty.
    """
    yc = np.clip(np.asarray(y, dtype=np.float64), lo, hi)
    if band is None:
        return np.full(yc.shape, lo), np.full(yc.shape, hi)
    return np.maximum(lo, yc - band), np.minimum(hi, yc + band)


def clip_donors(x: FloatArray, lo_t: FloatArray, hi_t: FloatArray) -> FloatArray:
    """Every donor cell clipped into its period's interval (row-local: public y and bounds only)."""
    return np.clip(np.asarray(x, dtype=np.float64), lo_t, hi_t)


def distances(xc: FloatArray, y: FloatArray, t0: int) -> FloatArray:
    """d_j = RMS over the pre-period of x̃_jt − y_t: a function of donor j's row and public y."""
    diff = xc[:, :t0] - np.asarray(y, dtype=np.float64)[:t0]
    return np.asarray(np.sqrt(np.mean(diff * diff, axis=1)), dtype=np.float64)


def nearest(d: FloatArray, k: int) -> FloatArray:
    """The 0/1 indicator of the k donors with the smallest d, ties to the lower index.

    Ranking by (d_j, j) is a total order in which a donor's position depends on its own d_j
    only: changing one donor moves that donor alone, so the chosen set changes by at most one
    swap (docs/proofs/synth_control_estimand.md §3).
    """
    order = np.lexsort((np.arange(d.size), d))
    out = np.zeros(d.size, dtype=np.float64)
    out[order[:k]] = 1.0
    return out


def counterfactual(xc: FloatArray, chosen: FloatArray, k: int) -> FloatArray:
    """The synthetic control at every period: the mean of the k chosen (clipped) donors."""
    return np.asarray(chosen @ xc / k, dtype=np.float64)


def block_slices(h: int, blocks: int | None) -> list[slice]:
    """The post-period's consecutive blocks (public): one per period, or ``blocks`` near-equal."""
    m = h if blocks is None else min(blocks, h)
    edges = np.linspace(0, h, m + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def block_means(values: FloatArray, slices: list[slice]) -> FloatArray:
    """Mean of ``values`` over each block."""
    return np.array([float(np.mean(values[s])) for s in slices])


def rmspe(y: FloatArray, cf: FloatArray, t0: int) -> float:
    """Pre-period root mean squared prediction error of the synthetic control."""
    r = np.asarray(y, dtype=np.float64)[:t0] - cf[:t0]
    return float(np.sqrt(np.mean(r * r)))


@dataclass(frozen=True)
class Prepared:
    """The clipped panel: the public intervals, the clipped donors and target, the distances."""

    lo_t: FloatArray
    hi_t: FloatArray
    xc: FloatArray
    yc: FloatArray
    d: FloatArray


def prepare(x_raw: FloatArray, y_raw: FloatArray, scales: CappedScales, t0: int) -> Prepared:
    """Clip every donor cell into its period's interval and compute each donor's distance."""
    lo_t, hi_t = intervals(y_raw, scales.lo, scales.hi, scales.band)
    xc = clip_donors(x_raw, lo_t, hi_t)
    yc = np.clip(np.asarray(y_raw, dtype=np.float64), scales.lo, scales.hi)
    return Prepared(lo_t, hi_t, xc, yc, distances(xc, yc, t0))


def released_values(p: Prepared, chosen: FloatArray, k: int, t0: int,
                    slices: list[slice]) -> dict[str, FloatArray]:
    """Each released number before its noise, by stage: the average post-period synthetic
    control, the path's block means and the pre-period RMSPE (given the chosen donors)."""
    cf = counterfactual(p.xc, chosen, k)
    return {STAGE_AVERAGE: np.array([np.mean(cf[t0:])]),
            STAGE_PATH: block_means(cf[t0:], slices),
            STAGE_FIT: np.array([rmspe(p.yc, cf, t0)])}


def placebo_pools(n: int) -> FloatArray:
    """pools[p] = the donors other than p, in order (each placebo's donor pool)."""
    return np.array([[i for i in range(n) if i != p] for p in range(n)], dtype=np.int64)


def placebo_distances(xb: FloatArray, t0: int) -> FloatArray:
    """d[p, i] = RMS over the pre-period of x_{pool_p[i]} − x_p (donors clipped to the bounds)."""
    n = xb.shape[0]
    pools = placebo_pools(n)
    diff = xb[pools][:, :, :t0] - xb[:, None, :t0]
    return np.asarray(np.sqrt(np.mean(diff * diff, axis=2)), dtype=np.float64)


def placebo_effects(xb: FloatArray, chosen: FloatArray, k: int, t0: int) -> FloatArray:
    """Each donor's placebo average post effect: its own post mean minus that of its k chosen
    donors (``chosen[p]`` indicates members of placebo p's pool)."""
    pools = placebo_pools(xb.shape[0])
    post = xb[:, t0:].mean(axis=1)
    synth = np.einsum("pi,pi->p", chosen, post[pools]) / k
    return np.asarray(post - synth, dtype=np.float64)


def placebo_values(x_raw: FloatArray, scales: CappedScales, t0: int,
                   choose: Any = None) -> tuple[FloatArray, FloatArray]:
    """(each placebo's chosen set, the n placebo effects before noise).

    Donors are clipped to the bounds (no band). ``choose(utilities)`` draws the sets (the private
    choice through the run's guard); None: the k nearest in every pool.
    """
    xb = np.clip(np.asarray(x_raw, dtype=np.float64), scales.lo, scales.hi)
    n = xb.shape[0]
    k = scales.placebo_k(n)
    d = placebo_distances(xb, t0)
    chosen = nearest_rows(d, k) if choose is None else np.asarray(choose(-d), dtype=np.float64)
    return chosen, placebo_effects(xb, chosen, k, t0)


def nearest_rows(d: FloatArray, k: int) -> FloatArray:
    """:func:`nearest` on every row."""
    return np.vstack([nearest(row, k) for row in d])


@dataclass(frozen=True)
class CappedMechanisms:
    """The mechanisms of one capped release (shared by the plan and the run, so the noise guard
    sees identical events). Absent releases are None."""

    choice: SubsetExponentialMechanism | None
    average: LaplaceMechanism
    path: LaplaceMechanism | GaussianMechanism | None
    fit: LaplaceMechanism | None
    blocks: int
    placebo_choice: SubsetSelectionFamily | None = None
    placebos: LaplaceMechanism | None = None

    def all(self) -> list[Any]:
        """The present mechanisms, in release order."""
        return [m for m in (self.choice, self.average, self.path, self.fit, self.placebo_choice,
                            self.placebos) if m is not None]


def path_mechanism(kind: PathNoise, epsilon: float, delta: float, scales: CappedScales,
                   blocks: int) -> LaplaceMechanism | GaussianMechanism:
    """The path release over ``blocks`` values.

    Notes
    -----
    Each block mean of the counterfactual moves by at most s = ``scales.per_period`` (a mean of
    per-period changes, each ≤ s), so the vector of m block means has ℓ1 sensitivity m·s and ℓ2
    sensitivity √m·s. Laplace: scale m·s/ε, pure ε-DP. Gaussian: analytic calibration at √m·s,
    (ε, δ)-DP.
    """
    s = scales.per_period
    if kind == "gaussian":
        return GaussianMechanism(epsilon, delta, math.sqrt(blocks) * s, stage=STAGE_PATH)
    return LaplaceMechanism(epsilon, blocks * s, stage=STAGE_PATH)


def resolve_path_noise(mode: str, epsilon: float, delta: float, scales: CappedScales,
                       blocks: int) -> PathNoise:
    """``auto``: Gaussian when δ > 0 and its per-value sd is below Laplace's (√2·scale)."""
    if mode in ("laplace", "gaussian"):
        return "gaussian" if mode == "gaussian" else "laplace"
    if delta <= 0.0:
        return "laplace"
    gauss = path_mechanism("gaussian", epsilon, delta, scales, blocks)
    lap = path_mechanism("laplace", epsilon, delta, scales, blocks)
    assert isinstance(gauss, GaussianMechanism)
    assert isinstance(lap, LaplaceMechanism)
    return "gaussian" if gauss.sigma < math.sqrt(2.0) * lap.scale else "laplace"


def build_mechanisms(scales: CappedScales, epsilons: dict[str, float], delta: float,
                     path_kind: PathNoise | None, blocks: int,
                     n: int | None = None) -> CappedMechanisms:
    """Every mechanism from the public scales and the ε of each stage (``epsilons`` by stage).

    Notes
    -----
    Neighbouring relation: replace one donor's whole series (``privacy_unit: donor``), or change
    one person in one donor unit (``individual``); n, T, T0, the target series and the bounds
    are public. Sensitivities (docs/proofs/synth_control_estimand.md):

    * choice (``private`` only): one donor's utility −d_j moves by ≤ Δ_u = min(cell_change,
      reach), no other utility moves: the subset exponential mechanism at ε_w is ε_w-DP.
    * average: the mean post-period counterfactual moves by ≤ s = c·ρ (``nearest``: at most one
      donor swaps, and both donors' cells lie in the same I_t) or c·cell_change (``private``:
      the k donors are the earlier release, fixed): Laplace(s/ε_a).
    * path: :func:`path_mechanism`; fit: the RMSPE moves by ≤ RMS of per-period changes ≤ s:
      Laplace(s/ε_f).
    * placebos (the n donors' own placebo effects, donors clipped to the bounds): with
      ``private``, their k-subsets by :class:`SubsetSelectionFamily` (one donor moves every
      distance of its own placebo and its own distance in every other, each by ≤ placebo_change);
      the effects by Laplace at ℓ1 sensitivity :meth:`CappedScales.placebo_l1`.

    Guarantee: the stages read the same donors and compose sequentially (adaptively: the later
    stages' sensitivities hold for every earlier output): Σ ε_stage, δ of the Gaussian path.
    """
    choice = None
    if STAGE_CHOICE in epsilons:
        choice = SubsetExponentialMechanism(epsilons[STAGE_CHOICE], scales.utility_sensitivity,
                                            scales.k, stage=STAGE_CHOICE)
    average = LaplaceMechanism(epsilons[STAGE_AVERAGE], scales.per_period, stage=STAGE_AVERAGE)
    path = None
    if STAGE_PATH in epsilons:
        assert path_kind is not None
        path = path_mechanism(path_kind, epsilons[STAGE_PATH], delta, scales, blocks)
    fit = None
    if STAGE_FIT in epsilons:
        fit = LaplaceMechanism(epsilons[STAGE_FIT], scales.per_period, stage=STAGE_FIT)
    placebo_choice = placebos = None
    if STAGE_PLACEBOS in epsilons:
        assert n is not None
        if STAGE_PLACEBO_CHOICE in epsilons:
            placebo_choice = SubsetSelectionFamily(
                epsilons[STAGE_PLACEBO_CHOICE], scales.placebo_change, scales.placebo_k(n), n,
                stage=STAGE_PLACEBO_CHOICE)
        placebos = LaplaceMechanism(epsilons[STAGE_PLACEBOS], scales.placebo_l1(n),
                                    stage=STAGE_PLACEBOS)
    return CappedMechanisms(choice, average, path, fit, blocks, placebo_choice, placebos)
