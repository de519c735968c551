"""The standard normal law in plain Python floats: Φ, log Φ and the upper quantile, each with a
bound on its own rounding error, so that privacy calibrations can round to the safe side.

A plan needs these (the analytic Gaussian σ, the Gaussian half-widths) and importing
``scipy.special`` costs more CPU than planning (issue 24). Everything here rests on the C
library's ``erfc`` (``math.erfc`` is glibc's here; glibc's tables of known errors list a few
ulp for it, taken as :data:`ERFC_REL_ERROR` = 8 ulp) and on float64 arithmetic (unit roundoff
u = 2⁻⁵³). The tests check each function against ``scipy.special`` (``ndtr``, ``log_ndtr``,
``ndtri``) over wide grids, within the stated error bounds.
"""

from __future__ import annotations

import math

UNIT = 2.0 ** -53
"""The unit roundoff u of float64."""
ERFC_REL_ERROR = 16.0 * UNIT
"""A bound on the relative error of ``math.erfc`` (a few ulp in glibc's tables; taken as 16u)."""
SQRT1_2 = 0.7071067811865476
"""1/√2 rounded to float64 (relative error ≤ u/2)."""
LOG_SQRT_2PI = 0.9189385332046728
"""ln √(2π) rounded to float64."""
TAIL_START = -37.0
"""Below this x, Φ(x) < 1e-299 is computed in logs by its asymptotic series (:func:`log_ndtr`)."""
TAIL_TERMS = 14
"""Terms of the asymptotic series of the Mills ratio used below :data:`TAIL_START`."""


def ndtr(x: float) -> float:
    """Φ(x) = ½·erfc(−x/√2), the standard normal distribution function."""
    return 0.5 * math.erfc(-x * SQRT1_2)


def ndtr_rel_error(x: float) -> float:
    """A bound on the relative error of :func:`ndtr` (x) against the exact Φ(x).

    Notes
    -----
    w = −x/√2 is computed with relative error ≤ 2u (the rounded constant and one product), and
    |d ln erfc(w)/dw| = 2e^{−w²}/(√π erfc(w)) ≤ w + √(w² + 2) ≤ 2|w| + √2 for w ≥ 0 (the
    Mills-ratio bound; for w < 0, erfc(w) ∈ (1, 2) and the derivative is ≤ 2/√π). So the
    argument's rounding moves ln erfc by ≤ (2|w| + √2)·|w|·2u, erfc itself errs by
    ≤ :data:`ERFC_REL_ERROR`, and the halving is exact (Φ ≥ 1e-299 above :data:`TAIL_START`).
    The bound is doubled for safety.
    """
    w = abs(x) * SQRT1_2
    arg = (2.0 * w + 1.5) * w * 2.0 * UNIT
    return 2.0 * (arg + ERFC_REL_ERROR + UNIT)


def log_ndtr(x: float) -> float:
    """ln Φ(x): ln of :func:`ndtr` above :data:`TAIL_START`, else the asymptotic series
    ln Φ(x) = −x²/2 − ln(−x) − ln√(2π) + ln Σ_{k<K} (−1)^k (2k−1)!!/x^{2k}."""
    if x >= TAIL_START:
        return math.log(ndtr(x))
    inv = 1.0 / (x * x)
    term, total = 1.0, 1.0
    for k in range(1, TAIL_TERMS):
        term *= -(2.0 * k - 1.0) * inv
        total += term
    return -0.5 * x * x - math.log(-x) - LOG_SQRT_2PI + math.log(total)


def log_ndtr_abs_error(x: float) -> float:
    """A bound on the absolute error of :func:`log_ndtr` (x) against the exact ln Φ(x).

    Notes
    -----
    Above :data:`TAIL_START`: ln of a value with relative error ≤ r = :func:`ndtr_rel_error`
    errs by ≤ 2r, plus the rounding of ln (≤ u·|ln Φ| + u). Below it (|x| ≥ 37): the series is
    alternating with decreasing terms up to k = 14 (the ratio (2k−1)/x² < 1), so its truncation
    errs by less than the first omitted term (27!!/37²⁸ < 1e-33); each of the four terms adds
    rounding ≤ a few u times its size, and x² ≤ 1e308 keeps −x²/2 finite or −∞ (then Φ = 0 and
    every bound holds). The bound takes 8u on each of them, doubled.
    """
    if x >= TAIL_START:
        value = abs(math.log(ndtr(x)))
        return 2.0 * ndtr_rel_error(x) + (value + 1.0) * UNIT * 2.0
    return 2.0 * 8.0 * UNIT * (0.5 * x * x + abs(math.log(-x)) + LOG_SQRT_2PI + 1.0)


def upper_quantile(tail: float) -> float:
    """z with 1 − Φ(z) = ``tail`` ∈ (0, ½], rounded *up* (so P(Z > z) ≤ ``tail``): the
    Gaussian half-width's z_{1−α/2} = ``upper_quantile(α/2)``.

    Notes
    -----
    Newton's method on g(z) = ln Φ(−z) − ln(tail), concave and decreasing in z (Φ is
    log-concave; g′(z) = −φ(z)/Φ(−z)), from z₀ = √(−2 ln tail), which lies beyond the root
    (Φ(−z₀) ≤ ½e^{−z₀²/2} = tail/2): from there every Newton iterate stays beyond the root (the
    tangent of a concave function lies above it) and decreases to it; it stops when a step
    moves z by ≤ 4u·z. The result is then raised ulp by ulp until :func:`log_ndtr` (−z) plus its
    error bound is ≤ ln(tail): the exact tail at z is at most ``tail``, the side on which a
    half-width
    stays a valid (1 − α) bound. Matches ``scipy.special.ndtri(1 − tail)`` to a few ulps (tested),
    never below it by more than its own rounding.
    """
    if not 0.0 < tail <= 0.5:
        raise ValueError(f"tail must be in (0, 0.5], got {tail!r}")
    if tail == 0.5:
        return 0.0
    target = math.log(tail)
    z = math.sqrt(-2.0 * target)
    for _ in range(100):
        g = log_ndtr(-z) - target
        slope = -math.exp(-0.5 * z * z - LOG_SQRT_2PI - log_ndtr(-z))
        step = g / slope
        z_new = max(z - step, 0.5 * z)
        if abs(z_new - z) <= 4.0 * UNIT * z:
            z = z_new
            break
        z = z_new
    while log_ndtr(-z) + log_ndtr_abs_error(-z) > target:
        z = math.nextafter(z, math.inf)
    return z
