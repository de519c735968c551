"""The public random-Fourier feature map of cate's ``features: rff`` (spec §3.6), in float32.

ζ̃(s) ∈ ℝ^{2m} for box-scaled covariates s ∈ [0, 1]^q, with Ω's columns ~ N(0, h⁻²I_q) drawn from
the public ``rff_seed`` before any data is read (:meth:`FourierFeatures.draw`):

1. the angles θ̃_j = (…((s̃_1Ω̃_{1j} + s̃_2Ω̃_{2j}) + s̃_3Ω̃_{3j}) + …) in float32 (s̃, Ω̃ the float32
   roundings of s and Ω), term by term in this fixed order by elementwise IEEE operations;
2. c_j = cos θ̃_j and s_j = sin θ̃_j by NumPy's float32 ``cos``/``sin``;
3. each pair scaled onto the circle of radius 1/√m: t_j = fl(fl(c_j²) + fl(s_j²)),
   κ_j = fl(K/fl(√t_j)) with the float32 constant K = fl((1 − 2⁻²⁰)/√m) (κ_j = 0 when
   t_j ∉ [½, 2] or not finite, and then the pair is 0), ζ̃_j = fl(c_jκ_j), ζ̃_{m+j} = fl(s_jκ_j).

Notes
-----
The second stage's privacy proof (docs/proofs/cate.md, "Random Fourier features") needs of the
feature map only that it is PUBLIC (a function of Ω and the covariates, never of other rows or of
the data) and that ‖ζ̃(s)‖ ≤ 1 for every s. ζ̃ is both:

* **Row-local and deterministic.** Every step is an elementwise operation on one row's own
  numbers (no BLAS, no reduction across entries whose order could depend on a row's position in
  a block), so ζ̃(s) is a function of s alone; float32 +, ×, ÷ and √ are correctly rounded IEEE
  operations, and NumPy's float32 cos/sin are elementwise functions of their argument on a given
  machine and NumPy build (across machines they may differ in the last float32 bits: the map is
  the same for a dataset and its neighbours, which is what the proof uses).
* **Norm ≤ 1 whatever cos/sin return** (the clip of step 3; u = 2⁻²⁴, float32 round to nearest):
  t_j ≥ (c_j² + s_j²)(1 − u)², fl(√t_j) ≥ √t_j(1 − u), κ_j ≤ K(1 + u)/fl(√t_j),
  |fl(c_jκ_j)| ≤ |c_j|κ_j(1 + u), so ‖(ζ̃_j, ζ̃_{m+j})‖ ≤ K(1 + u)²/(1 − u)² and
  K ≤ (1 − 2⁻²⁰)(1 + 2u)/√m (its float64 quotient rounded to float32); since
  (1 − 16u)(1 + 2u)(1 + u)² ≤ (1 − u)², each pair has norm ≤ 1/√m and ‖ζ̃(s)‖² ≤ m·(1/m) = 1.
  (t_j ∈ [½, 2] keeps t_j, √t_j and κ_j in float32's normal range; an underflow in c_j² or
  c_jκ_j adds at most 2⁻¹²⁶ to a term, far inside the slack between (1 − 16u)(1 + 2u)(1 + u)²
  and (1 − u)².)

Against the exact map ζ(s) = m^{-1/2}(cos Ωᵀs, sin Ωᵀs) of the paper, ζ̃ errs by the float32
angle (≈ q·2⁻²⁴·‖Ω_j‖₁) and cos/sin roundings and the factor 1 − 2⁻²⁰: ~10⁻⁶ per feature, far
below the random-feature approximation of the kernel itself (~m^{-1/2}). The released weights are
the weights of ζ̃; evaluating them with the float64 formula instead changes τ̂(x) by ~10⁻⁶‖w‖
(post-processing either way). The solver's certificate (``rff_accuracy``) is taken over ζ̃, which
the passes compute bit for bit (float32 values, converted exactly to float64 before any float64
product), so its feature error e_z bounds nothing larger than before (issue 24: this map replaced
float64 cos/sin, ~15× the CPU time at 2m = 1,000).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import SUM_CHUNK

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BLOCK_BYTES = 32 * 2**20
"""Target size of one block of feature rows in float64 (rows per block = BLOCK_BYTES / (8·2m), at
least 256): a pass converts a block's float32 features into one float64 buffer of this size."""
SHRINK = 1.0 - 2.0**-20
"""Each (cos, sin) pair is scaled to norm ≤ SHRINK/√m before the rounding allowance (module Notes)."""
SUB_ROWS = 128
"""Rows transformed at a time (the float32 temporaries of 128 × m stay in a core's cache)."""


def block_rows(p: int) -> int:
    """Rows per streamed block for p features: ~``BLOCK_BYTES`` in float64, a multiple of
    ``SUM_CHUNK`` when at least that many, so the exact gradient's blocks of ``SUM_CHUNK`` rows lie
    inside kept feature blocks."""
    rows = max(256, BLOCK_BYTES // (8 * p))
    return rows - rows % SUM_CHUNK if rows >= SUM_CHUNK else rows


@dataclass(frozen=True)
class FourierFeatures:
    """The public feature map ζ̃ on box-scaled covariates (module docstring)."""

    omega: FloatArray  # (q, m)

    @classmethod
    def draw(cls, q: int, m: int, bandwidth: float, seed: int) -> FourierFeatures:
        """Ω ~ N(0, h⁻²) from the public seed."""
        return cls(np.random.default_rng(seed).normal(0.0, 1.0 / bandwidth, size=(q, m)))

    @property
    def dim(self) -> int:
        """2m."""
        return 2 * int(self.omega.shape[1])

    @functools.cached_property
    def _omega32(self) -> Float32Array:
        return np.ascontiguousarray(self.omega, dtype=np.float32)

    @functools.cached_property
    def _radius(self) -> np.float32:
        """K = fl32((1 − 2⁻²⁰)/√m), the pairs' radius before the rounding allowance."""
        return np.float32(SHRINK / math.sqrt(int(self.omega.shape[1])))

    def transform(self, s: FloatArray) -> FloatArray:
        """ζ̃(s) for the rows of ``s``, converted exactly to float64 (norm ≤ 1)."""
        return self.transform32(s).astype(np.float64)

    def transform32(self, s: FloatArray, out: Float32Array | None = None) -> Float32Array:
        """ζ̃(s) for the rows of ``s`` as computed (float32, norm ≤ 1; module docstring), into
        ``out`` (a C-contiguous float32 array of n × 2m) when given."""
        s32 = np.ascontiguousarray(np.atleast_2d(s), dtype=np.float32)
        n, m = s32.shape[0], int(self.omega.shape[1])
        if out is None:
            out = np.empty((n, 2 * m), dtype=np.float32)
        rows = min(SUB_ROWS, max(n, 1))
        bufs = tuple(np.empty((rows, m), np.float32) for _ in range(4))
        for i in range(0, n, rows):
            j = min(n, i + rows)
            self._rows(s32[i:j], out[i:j], *(b[:j - i] for b in bufs))
        return out

    def _rows(self, s32: Float32Array, out: Float32Array, ang: Float32Array, tmp: Float32Array,
              cos: Float32Array, sin: Float32Array) -> None:
        """Steps 1–3 of the module docstring for a few rows, into ``out`` (the other arrays are
        contiguous scratch: NumPy's float32 kernels are several times slower on strided rows)."""
        om = self._omega32
        np.multiply(s32[:, :1], om[0], out=ang)
        for k in range(1, om.shape[0]):
            np.multiply(s32[:, k:k + 1], om[k], out=tmp)
            ang += tmp
        np.cos(ang, out=cos)
        np.sin(ang, out=sin)
        clip_pairs(cos, sin, self._radius, out, ang, tmp)

    def evaluate(self, s: FloatArray, w: FloatArray) -> FloatArray:
        """ζ̃(s)ᵀw for the rows of ``s``, block by block (float64 products)."""
        s = np.atleast_2d(s)
        step = block_rows(self.dim)
        return np.concatenate([self.transform(s[i:i + step]) @ w
                               for i in range(0, s.shape[0], step)] or [np.empty(0)])


def clip_pairs(cos: Float32Array, sin: Float32Array, radius: np.float32, out: Float32Array,
               t: Float32Array, tmp: Float32Array) -> None:
    """Step 3 of the module docstring: out = (κ·cos, κ·sin), each pair of norm ≤ 1/√m for
    ``radius`` = K, whatever the values of ``cos`` and ``sin`` (NaN, ±inf, any size: such pairs
    become 0). ``t`` and ``tmp`` are scratch of the shape of ``cos``; ``cos`` and ``sin`` are
    overwritten."""
    m = cos.shape[1]
    with np.errstate(all="ignore"):  # overflow, 0 or NaN only in pairs that become 0 below
        np.square(cos, out=t)
        np.square(sin, out=tmp)
        t += tmp  # t_j
        ok = (t >= 0.5) & (t <= 2.0)  # False for NaN
        np.sqrt(t, out=t)
        np.divide(radius, t, out=t)  # κ_j
    if not bool(ok.all()):
        bad = ~ok
        t[bad] = 0.0
        cos[bad] = 0.0
        sin[bad] = 0.0
    np.multiply(cos, t, out=out[:, :m])
    np.multiply(sin, t, out=out[:, m:])
