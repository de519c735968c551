"""One registry by event kind: a receipt event's mechanism, its privacy map and its calibration.

A receipt event records a mechanism's kind, norm, sensitivity, noise scale and parameters. From these
alone this module answers, for every kind:

- :func:`privacy_loss` — the exact privacy curve of the recorded noise when the mechanism's input
  moves by a given shift (the ``noise_curve`` of the mechanism's class; ``audit privacy`` uses it
  on observed shifts);
- :func:`check_event` — the ε its scale and sensitivity give at its δ (``audit verify`` flags an
  event claiming less), and whether the mechanism rebuilt from the event's (ε, δ, sensitivity,
  parameters) by its own calibration has exactly the recorded scale;
- :func:`release_curve` — the curve the ledger's accountant composes: the noise law at the
  sensitivity for an output release whose calibration explains it, otherwise the event's stated
  (ε, δ) (:func:`claim_reason` says why).

The last rule is an allow-list: a release is composed by its noise only when the event *is* the
output of its kind's mechanism (rebuilt scale = recorded scale) and nothing marks it as resting on
another proof. Objective perturbation (the noise is one term of a privacy loss that also has a
Jacobian term), caller-calibrated Gaussian vectors and uncertified events are composed by what they
state, as basic composition does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.errors import SpecError
from dpcausal.mechanisms.curve import PrivacyCurve
from dpcausal.mechanisms.exponential import ExponentialMechanism
from dpcausal.mechanisms.gaussian import GaussianMechanism
from dpcausal.mechanisms.gaussian_process import GaussianProcessMechanism
from dpcausal.mechanisms.l2_laplace import L2LaplaceMechanism
from dpcausal.mechanisms.laplace import LaplaceMechanism
from dpcausal.mechanisms.subset_exponential import (
    SubsetExponentialMechanism,
    SubsetSelectionFamily,
)

SCALE_REL_TOL = 1e-9
"""Relative tolerance between a recorded noise scale and the rebuilt mechanism's (the plan and the
rebuild run the same code; this only absorbs JSON round trips)."""


class NoiseLaw(Protocol):
    """A mechanism class as the registry uses it."""

    @staticmethod
    def noise_curve(noise_scale: float, shift: float,
                    params: Mapping[str, Any]) -> PrivacyCurve: ...  # pragma: no cover


def _gaussian(ev: PrivacyEvent) -> GaussianMechanism:
    calibration = ev.params.get("calibration", "analytic")
    return GaussianMechanism(ev.epsilon, ev.delta, ev.sensitivity, calibration=calibration,
                             stage=ev.stage)


def _gaussian_process(ev: PrivacyEvent) -> GaussianProcessMechanism:
    return GaussianProcessMechanism(ev.epsilon, ev.delta, ev.sensitivity,
                                    float(ev.params["bandwidth"]),
                                    calibration=ev.params.get("calibration", "classic"),
                                    stage=ev.stage, paths=int(ev.params.get("paths", 1)))


MECHANISMS: dict[str, tuple[type[NoiseLaw], Callable[[PrivacyEvent], Any]]] = {
    "laplace": (LaplaceMechanism,
                lambda ev: LaplaceMechanism(ev.epsilon, ev.sensitivity, stage=ev.stage)),
    "gaussian": (GaussianMechanism, _gaussian),
    "gaussian_process": (GaussianProcessMechanism, _gaussian_process),
    "l2_laplace": (L2LaplaceMechanism,
                   lambda ev: L2LaplaceMechanism(ev.epsilon, ev.sensitivity,
                                                 int(ev.params.get("dim", 1)), stage=ev.stage)),
    "exponential": (ExponentialMechanism,
                    lambda ev: ExponentialMechanism(ev.epsilon, ev.sensitivity,
                                                    bool(ev.params.get("monotonic", False)),
                                                    stage=ev.stage)),
    "subset_exponential": (SubsetExponentialMechanism,
                           lambda ev: SubsetExponentialMechanism(ev.epsilon, ev.sensitivity,
                                                                 int(ev.params["k"]),
                                                                 stage=ev.stage)),
    "subset_family": (SubsetSelectionFamily,
                      lambda ev: SubsetSelectionFamily(ev.epsilon, ev.sensitivity,
                                                       int(ev.params["k"]),
                                                       int(ev.params["selections"]),
                                                       stage=ev.stage)),
}
"""Event kind → (the mechanism class whose ``noise_curve`` maps its noise, how to rebuild the
mechanism from an event by its own calibration)."""


def _entry(event: PrivacyEvent) -> tuple[type[NoiseLaw], Callable[[PrivacyEvent], Any]]:
    try:
        return MECHANISMS[event.kind]
    except KeyError:
        raise ValueError(f"no mechanism of kind {event.kind!r} is known") from None


def privacy_loss(event: PrivacyEvent, shift: float) -> PrivacyCurve:
    """The privacy curve of ``event``'s recorded noise when its input moves by ``shift``."""
    law, _ = _entry(event)
    return law.noise_curve(event.noise_scale, shift, event.params)


def claim_reason(event: PrivacyEvent) -> str | None:
    """Why ``event``'s privacy rests on its stated (ε, δ) rather than on its noise; None if not."""
    if event.params.get("perturbation") == "objective":
        return "objective perturbation (its loss has a term besides the noise)"
    if event.params.get("certified") is False:
        return "uncertified (its charge is nominal)"
    if event.kind == "gaussian" and event.params.get("calibration") == "caller":
        return "noise calibrated by the caller's own proof"
    return None


def claim_curve(epsilon: float, delta: float) -> PrivacyCurve:
    """The worst case of every (ε, δ)-DP release (pure ε when δ = 0)."""
    return PrivacyCurve("pure", epsilon) if delta == 0.0 else PrivacyCurve("claim", epsilon, delta)


@dataclass(frozen=True, slots=True)
class EventCheck:
    """What an event's noise says about its claim.

    Attributes
    ----------
    epsilon
        The ε the recorded noise scale gives at the event's δ and sensitivity (``inf`` when the
        noise cannot give that δ).
    rebuilt_scale
        The noise scale of the mechanism rebuilt from the event's (ε, δ, sensitivity, parameters)
        by its own calibration, or None when it cannot be rebuilt.
    problem
        Why it cannot be rebuilt, or None.
    """

    epsilon: float
    rebuilt_scale: float | None
    problem: str | None = None

    def explains(self, event: PrivacyEvent) -> bool:
        """True when the rebuilt mechanism has exactly the recorded noise scale."""
        return self.rebuilt_scale is not None and math.isclose(
            self.rebuilt_scale, event.noise_scale, rel_tol=SCALE_REL_TOL, abs_tol=0.0)


def check_event(event: PrivacyEvent) -> EventCheck:
    """Recompute ``event``'s ε from its kind, sensitivity and scale; rebuild its mechanism."""
    law, rebuild = _entry(event)
    try:
        eps = law.noise_curve(event.noise_scale, event.sensitivity, event.params).epsilon(
            event.delta)
    except ValueError:  # a sensitivity without noise
        eps = math.inf
    try:
        scale = float(rebuild(event).event().noise_scale)
    except (ValueError, KeyError, TypeError, SpecError) as exc:
        return EventCheck(eps, None, f"its mechanism cannot be rebuilt ({exc})")
    return EventCheck(eps, scale)


def release_curve(event: PrivacyEvent) -> PrivacyCurve:
    """The curve an accountant composes for ``event`` (module docstring: noise or claim)."""
    if claim_reason(event) is None and check_event(event).explains(event):
        return privacy_loss(event, event.sensitivity)
    return claim_curve(event.epsilon, event.delta)
