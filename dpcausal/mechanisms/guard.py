"""The one guard between a run's privacy plan and its noise (DESIGN §1.7).

The pipeline builds a :class:`NoiseGuard` from the plan it charged and hands it to the method (in
memory or on an engine) instead of a random generator. A method never holds the privacy generator:
it asks the guard to release a value through a mechanism, and the guard draws only when that
mechanism's event is the planned event of its stage (same kind, stage, norm, ε, δ, sensitivity,
noise scale and dimension) and the stage has not been drawn yet. After the method returns, the
pipeline calls :meth:`NoiseGuard.check_all_drawn` before anything is written or charged. Any
mismatch is a bug, not a user error: :class:`NoiseGuardError` makes the CLI exit 1 with nothing
released or spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.mechanisms._rng import noise_generator, noise_source
from dpcausal.mechanisms.objective import ObjectivePerturbation

FloatArray = npt.NDArray[np.float64]
Form = Literal["release", "release_weights", "objective"]

MATCHED_FIELDS = ("kind", "stage", "norm", "epsilon", "delta", "sensitivity", "noise_scale")
"""The event fields a draw must share with its planned event (and ``params["dim"]`` if both have
one, and ``params["perturbation"]`` always: an objective perturbation must be planned as one, so
that accountants compose it by its stated (ε, δ), :mod:`dpcausal.mechanisms.registry`). Floats
agree to a relative 1e-12: the plan and the run compute them by the same code."""
REL_TOL = 1e-12


class NoiseGuardError(RuntimeError):
    """A privacy draw did not follow the plan. A bug (exit 1), never a user mistake."""


class Mechanism(Protocol):
    """What the guard needs of a mechanism: its event (the cost it claims)."""

    def event(self) -> PrivacyEvent: ...  # pragma: no cover - protocol


@dataclass(frozen=True)
class Draw:
    """One privacy draw as the guard admitted it: the mechanism, its input and the call's options.

    Holds the pre-noise input: as sensitive as the data, never written anywhere. The audit uses it
    to draw many more outputs of the same mechanism at the same input (:meth:`resample`).
    """

    stage: str
    form: Form
    mechanism: Any
    value: Any
    kwargs: dict[str, Any] = field(default_factory=dict)

    def resample(self, count: int, *, test_seed: int) -> npt.NDArray[Any]:
        """``count`` fresh outputs of the mechanism at the same input, stacked on axis 0.

        For ``audit privacy`` only: the noise is seeded (no DP claim) and nothing is released.
        Objective perturbation has no output of its own (its output is a solve): refused.
        """
        rng = noise_generator(test_seed)
        if self.form == "release":
            return np.asarray(self.mechanism.release_many(self.value, count, rng=rng,
                                                          **self.kwargs))
        if self.form == "release_weights":
            return np.asarray(self.mechanism.release_weights_many(self.value, count, rng=rng))
        raise ValueError(f"stage {self.stage!r} is an objective perturbation: its output is the "
                         "perturbed solve, not a noised value; audit it by complete releases")


class NoiseGuard:
    """Release values through the planned mechanisms only, each planned stage exactly once.

    Parameters
    ----------
    plan
        The plan the run was checked and will be charged against.
    test_seed
        ``None`` (real runs): the ChaCha20 generator keyed from OS entropy. An integer: seeded
        test noise (no DP guarantee; the receipt says so).
    """

    def __init__(self, plan: PrivacyPlan, *, test_seed: int | None = None) -> None:
        stages = [e.stage for e in plan.events]
        if len(set(stages)) != len(stages):
            raise NoiseGuardError(f"the plan names a stage twice: {stages}")
        self._planned = {e.stage: e for e in plan.events}
        self._drawn: list[str] = []
        self._closed = False
        self._rng = noise_generator(test_seed)
        self.source = noise_source(test_seed)
        """The receipt's ``rng`` entry."""

    @property
    def drawn(self) -> tuple[str, ...]:
        """The stages drawn so far, in order."""
        return tuple(self._drawn)

    def release(self, mechanism: Any, value: Any, **kwargs: Any) -> Any:
        """Return ``mechanism.release(value, rng=<privacy generator>, **kwargs)`` if planned."""
        return self._draw(self._admit(mechanism, "release", value, kwargs))

    def release_weights(self, mechanism: Any, weights: Any) -> FloatArray:
        """Gaussian-process release of a finite feature map's weights (``release_weights``)."""
        out: FloatArray = self._draw(self._admit(mechanism, "release_weights", weights, {}))
        return out

    def objective_noise(self, perturbation: ObjectivePerturbation) -> FloatArray:
        """Draw the noise vector b of an objective perturbation."""
        if not isinstance(perturbation, ObjectivePerturbation):
            raise NoiseGuardError("objective_noise needs an ObjectivePerturbation (noise law + claim)")
        out: FloatArray = self._draw(self._admit(perturbation, "objective", None, {}))
        return out

    def check_all_drawn(self) -> None:
        """Raise unless every planned stage was drawn; then refuse any further draw."""
        self._closed = True
        missing = [s for s in self._planned if s not in self._drawn]
        if missing:
            raise NoiseGuardError(f"planned stage(s) {missing} were charged but never drawn")

    def _admit(self, mechanism: Any, form: Form, value: Any, kwargs: dict[str, Any]) -> Draw:
        if self._closed:
            raise NoiseGuardError("a privacy draw after the run finished")
        event = mechanism.event()
        planned = self._planned.get(event.stage)
        if planned is None:
            raise NoiseGuardError(f"a draw for stage {event.stage!r}, which the plan does not "
                                  f"contain (planned: {list(self._planned)})")
        if event.stage in self._drawn:
            raise NoiseGuardError(f"stage {event.stage!r} drawn twice; the plan charges it once")
        wrong = [f"{name}: planned {getattr(planned, name)!r}, drawn {getattr(event, name)!r}"
                 for name in MATCHED_FIELDS if not _same(getattr(planned, name),
                                                         getattr(event, name))]
        if "dim" in planned.params and "dim" in event.params and \
                planned.params["dim"] != event.params["dim"]:
            wrong.append(f"dim: planned {planned.params['dim']!r}, drawn {event.params['dim']!r}")
        if planned.params.get("perturbation") != event.params.get("perturbation"):
            wrong.append(f"perturbation: planned {planned.params.get('perturbation')!r}, drawn "
                         f"{event.params.get('perturbation')!r}")
        if wrong:
            raise NoiseGuardError(f"the draw for stage {event.stage!r} does not match its planned "
                                  "event: " + "; ".join(wrong))
        self._drawn.append(event.stage)
        return Draw(event.stage, form, mechanism, value, dict(kwargs))

    def _draw(self, draw: Draw) -> Any:
        """The only place a release draws from the privacy generator."""
        if draw.form == "release":
            return draw.mechanism.release(draw.value, rng=self._rng, **draw.kwargs)
        if draw.form == "release_weights":
            return draw.mechanism.release_weights(draw.value, rng=self._rng)
        return draw.mechanism.sample(rng=self._rng)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
    return bool(a == b)
