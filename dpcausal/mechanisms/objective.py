"""The noise vector of an objective-perturbation mechanism, with the privacy claim it serves."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector
from dpcausal.mechanisms.l2_laplace import L2LaplaceMechanism


@dataclass(frozen=True, slots=True)
class ObjectivePerturbation:
    """Draw the vector b added to an objective; its law is ``noise``'s, its claim (ε, δ) the caller's.

    Unlike output perturbation, b is drawn without any input (it does not depend on the data); the
    privacy of the perturbed minimiser comes from the caller's proof (the noise term of the loss
    bounded through ``noise``'s law and sensitivity, plus the caller's Jacobian or regulariser
    term). So the event keeps ``noise``'s kind, stage, sensitivity and scale, and carries the
    whole mechanism's ``epsilon`` and ``delta``.

    Notes
    -----
    Neighbouring relation, sensitivity and guarantee: the caller's (e.g.
    :func:`dpcausal.commands.two_stage.plan.mechanism`). ``dp_guarantee`` is the plan's business: an
    uncertified objective perturbation (DPSC_obj) uses this class too, with its nominal charge.
    """

    noise: L2LaplaceMechanism | GaussianNoiseVector
    epsilon: float
    delta: float

    def event(self) -> PrivacyEvent:
        """The planned cost: ``noise``'s event with the whole mechanism's (ε, δ), marked
        ``params["perturbation"] = "objective"`` (its ε does not follow from the noise alone: the
        accountant composes it by its stated (ε, δ); :mod:`dpcausal.mechanisms.registry`)."""
        base = self.noise.event()
        return dataclasses.replace(base, epsilon=self.epsilon, delta=self.delta,
                                   params={**base.params, "perturbation": "objective"})

    def sample(self, *, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """One draw of b."""
        return self.noise.release(np.zeros(int(self.noise.dim)), rng=rng)
