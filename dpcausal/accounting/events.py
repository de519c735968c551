"""Frozen privacy events: the closed vocabulary of the receipt.

An event records what one mechanism costs and why (its sensitivity and noise scale), computed from
public quantities alone, before any data is touched.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from dpcausal.errors import SpecError

MAX_NOISE_SCALE = 1e50
"""The largest noise scale (Laplace b, Gaussian σ, Gamma or Gumbel scale) dpcausal computes with.

Error bounds and intervals square noise scales and multiply two variances (synth-control's bound
holds a scale⁴) before summing over up to ~1e8 coordinates: below 1e50 all of that stays far
inside float64's range (1.8e308). A larger scale comes only from an ε (or ε share) so small, or
public bounds so wide, that the release would be nothing but noise."""

EventKind = Literal["laplace", "gaussian", "exponential", "l2_laplace", "gaussian_process",
                    "subset_exponential", "subset_family"]


def check_noise_scale(stage: str, epsilon: float, scale: float) -> None:
    """Refuse, as a spec error (exit 2), a mechanism that cannot be computed in float64.

    That is an ε share below the smallest normal float64 (2.2e-308, or underflowed to 0), or a
    noise scale that is not a number in ``[0, MAX_NOISE_SCALE]`` (Δ/ε overflowing to inf, or
    too large to square and multiply). Every mechanism calls it when built, and every event when
    created, so a plan — hence a dry run, ``--dry-run --json`` and a release alike — refuses
    before any row is read.

    Raises
    ------
    SpecError
        Naming ``privacy.epsilon``, the stage, its ε and the scale.
    """
    if not 0.0 <= epsilon < sys.float_info.min and 0.0 <= scale <= MAX_NOISE_SCALE:
        return
    tiny = 0.0 <= epsilon < sys.float_info.min
    why = (f"below the smallest normal float64 ({sys.float_info.min:.3g})" if tiny else
           f"so its noise scale would be {scale:.3g}, beyond the {MAX_NOISE_SCALE:.0e} float64 "
           "arithmetic on it can carry")
    units = "" if tiny else (
        "; if ε is not small, the scale comes from the data's units instead: give the outcome "
        "(or the columns whose bounds set this stage's sensitivity) and their bounds in smaller "
        "units")
    raise SpecError(
        f"privacy.epsilon: ε too small for float64: the mechanism of stage '{stage}' gets "
        f"ε = {epsilon:.3g}, {why}; raise privacy.epsilon (an ε this small would release only "
        f"noise){units}", field="privacy.epsilon")


@dataclass(frozen=True, slots=True)
class PrivacyEvent:
    """The cost of one mechanism.

    Parameters
    ----------
    kind
        The mechanism family.
    stage
        Where in the method the mechanism runs, e.g. ``"owl.theta"``.
    epsilon, delta
        The privacy parameters this mechanism consumes.
    sensitivity
        The sensitivity the noise is calibrated to, in the norm named by ``norm``.
    norm
        ``"l1"``, ``"l2"`` or ``"utility"`` (exponential mechanism: range of one utility).
    noise_scale
        The scale of the noise drawn (Laplace b, Gaussian sigma, Gamma scale; for the exponential
        mechanism the Gumbel scale 2Δ/ε).
    params
        Public parameters the sensitivity was derived from (bounds, γ, dimension...).
    partition
        ``None`` (default): the mechanism reads every row. ``"<split>/<part>"``: it reads only part
        ``<part>`` of a public, data-independent partition ``<split>`` of the rows into disjoint parts
        (e.g. ``"cate.halves/1"``). Under replace-one neighbours a record lies in exactly one part, so
        events on different parts of one split compose in parallel (max, not sum); see
        :func:`dpcausal.accounting.budget.compose_events`.
    """

    kind: EventKind
    stage: str
    epsilon: float
    delta: float
    sensitivity: float
    norm: Literal["l1", "l2", "utility"]
    noise_scale: float
    params: dict[str, Any] = field(default_factory=dict)
    partition: str | None = None

    def __post_init__(self) -> None:
        self._check_representable()
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"event epsilon must be finite and > 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta < 1.0):
            raise ValueError(f"event delta must be in [0, 1), got {self.delta!r}")
        if not (math.isfinite(self.sensitivity) and self.sensitivity >= 0):
            raise ValueError(f"event sensitivity must be finite and >= 0, got {self.sensitivity!r}")
        if self.partition is not None and self.partition.count("/") != 1:
            raise ValueError(f"event partition must look like 'split/part', got {self.partition!r}")

    def _check_representable(self) -> None:
        """Every event passes :func:`check_noise_scale` (the mechanisms check it when built)."""
        check_noise_scale(self.stage, self.epsilon, self.noise_scale)
        if not math.isfinite(self.sensitivity):
            check_noise_scale(self.stage, self.epsilon, math.inf)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form used in receipts and the ledger (``partition`` only when set)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "stage": self.stage,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "norm": self.norm,
            "noise_scale": self.noise_scale,
            "params": dict(self.params),
        }
        if self.partition is not None:
            out["partition"] = self.partition
        return out
