"""What ``audit privacy`` needs to drive ``two-stage``: its :data:`ADAPTER`.

Neighbouring relation: replace one row in place (one individual); n is public.

DP-2ERM releases θ by OBJECTIVE perturbation, so its privacy loss is not a function of a pre-noise
vector: for θ in the interior of the ℓ₁ ball the output density is pdf_D(θ) = ν(b_D(θ))·det J_D with
b_D(θ) = g_D − A_Dθ (g = 2Σ w_i t_i x_i, A = 2Σ w_i x_i x_iᵀ + nγI) and J_D = A_D (spec §2.7 and §10
T2; the exact evaluation: cli_tests/two_stage_privacy_loss.py). ``pre_noise`` therefore returns an
:class:`ObjectiveInput` that computes the exact interior loss against another one — sup over θ of
|β(‖b_D′(θ)‖ − ‖b_D(θ)‖) + log det J_D − log det J_D′| — by a multi-start local search over the open
ℓ₁ ball (a lower bound on the sup, attained by the witnesses the search starts from), and the exact
gradient-map shift sup_θ ‖b_D(θ) − b_D′(θ)‖ (convex in θ: attained at a vertex λ₁·(±e_j)), which is
compared with the event's sensitivity ζ·W̄₁ˢ. Only ``noise: gamma`` (pure ε-DP) is audited this way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import optimize

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.estimators import EventLoss
from dpcausal.audit.neighbours import Pair, RowDomain, replace_one
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage.audit_pairs import planted_pair
from dpcausal.commands.two_stage.method import METHOD
from dpcausal.commands.two_stage.privacy import OBJECTIVE_STAGE
from dpcausal.commands.two_stage.setup import (
    build_setup,
    prepare,
    targets,
    with_center,
    with_radius,
)
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights
from dpcausal.errors import SpecError
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
RANDOM_STARTS = 2


def _domain(spec: TwoStageSpec) -> RowDomain:
    cols = build_setup(spec).columns  # refuses missing bounds with the command's message
    sec = spec.two_stage
    return RowDomain(cols.numeric_domain(), {cols.treatment: [sec.treated, sec.control_label()]})


def synthesize(spec: TwoStageSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows drawn uniformly inside the public bounds, both arms equally likely."""
    return _domain(spec).synthesize(n, rng)


def neighbours(spec: TwoStageSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-row pairs around ``frame``: first the searched planted pair that reaches
    ζ·W̄₁ˢ (:func:`~dpcausal.commands.two_stage.audit_pairs.planted_pair`), then four kinds in turn.

    A planted pair at the upper corner with the arm flipped (t = 2(y − c)ã changes sign: the
    replaced record's gradients are anti-parallel, the E1 case); a planted pair at a random corner
    with Y at the top vs the bottom of its range; a row replaced by a random corner of the bounds;
    and by a random row.
    """
    domain = _domain(spec)
    outcome = build_setup(spec).columns.outcome
    lo, hi = domain.numeric[outcome]
    plan = METHOD.plan(spec, len(frame), {}, rng=np.random.default_rng(0))  # public: λ₁
    setup = with_radius(build_setup(spec), plan.details)
    for i in range(k):
        idx = int(rng.integers(len(frame)))
        kind = i % 4
        if i == 0:
            yield planted_pair(spec, setup, frame, idx)
        elif kind == 0:
            a, b = domain.extreme_pair(rng)
            yield (f"row {idx} planted at the upper corner, arm flipped",
                   replace_one(frame, idx, a), replace_one(frame, idx, b))
        elif kind == 1:
            row = domain.corner_row(rng)
            yield (f"row {idx} planted at a corner, Y top vs bottom",
                   replace_one(frame, idx, {**row, outcome: hi}),
                   replace_one(frame, idx, {**row, outcome: lo}))
        elif kind == 2:
            yield f"row {idx} -> corner of the bounds", None, replace_one(frame, idx,
                                                                          domain.corner_row(rng))
        else:
            yield f"row {idx} -> random row in the bounds", None, replace_one(frame, idx,
                                                                              domain.random_row(rng))


@dataclass(frozen=True)
class ObjectiveInput:
    """One data set's side of DP-2ERM's stage 2: b(θ) = g − Aθ and J = A (squared loss)."""

    g: FloatArray
    a: FloatArray
    l1_radius: float
    beta: float
    """Rate of the Gamma-norm noise density ν(b) ∝ exp(−β‖b‖) (β = 1/noise scale)."""

    def _u(self, theta: FloatArray) -> FloatArray:
        """The inverse of θ = λ₁u/(1 + ‖u‖₁), a bijection of ℝ^p onto the open ℓ₁ ball of radius
        λ₁ (the search runs over u; a θ on or beyond the sphere is first pulled inside)."""
        norm = float(np.abs(theta).sum())
        if norm >= self.l1_radius:
            theta = theta * (0.999 * self.l1_radius / norm)
            norm = float(np.abs(theta).sum())
        return theta / (self.l1_radius - norm)

    def shift(self, other: ObjectiveInput) -> float:
        """sup over the ℓ₁ ball of ‖b_D(θ) − b_D′(θ)‖ (convex in θ: the max is at a vertex)."""
        dg, da = self.g - other.g, self.a - other.a
        best = float(np.linalg.norm(dg))
        for j in range(len(dg)):
            for sgn in (1.0, -1.0):
                best = max(best, float(np.linalg.norm(dg - da[:, j] * sgn * self.l1_radius)))
        return best

    def _sup(self, first: ObjectiveInput, second: ObjectiveInput, const: float,
             starts: list[FloatArray]) -> float:
        """sup over interior θ of β(‖b_second(θ)‖ − ‖b_first(θ)‖) + const."""

        p = len(first.g)
        g = np.concatenate([second.g, first.g])  # both sides' b(θ) = g − Aθ in one product
        a = np.vstack([second.a, first.a])
        radius, beta = self.l1_radius, self.beta

        def neg(u: FloatArray) -> float:  # called ~10⁴ times per start: no avoidable overhead
            b = g - a @ (radius * u / (1.0 + float(np.abs(u).sum())))  # b at θ(u), see _u
            b2, b1 = b[:p], b[p:]
            return -(beta * (math.sqrt(float(b2 @ b2)) - math.sqrt(float(b1 @ b1))) + const)

        best = -math.inf
        for th0 in starts:  # ftol 1e-8 (relative): the loss to ~1e-8, far below any claim's
            # digits; on the shipped config every gray-box figure equals the 1e-12 search's to
            # 1e-8, and the paper calibration's 1.019 leak is still found (tested); the audit
            # takes 28 CPU-s instead of 54 (benchmarks/RESULTS.md, issue 24)
            res = optimize.minimize(neg, self._u(th0), method="Powell",
                                    options={"xtol": 1e-5, "ftol": 1e-8, "maxfev": 10_000})
            best = max(best, -float(res.fun), -neg(self._u(th0)))
        return best

    def privacy_loss(self, other: ObjectiveInput, event: PrivacyEvent) -> EventLoss:
        """The exact interior privacy loss of the Gamma-noise release between this data set (D)
        and ``other`` (D′), both directions; shift = sup ‖b_D − b_D′‖ for the sensitivity check."""
        logdet = float(np.linalg.slogdet(self.a)[1] - np.linalg.slogdet(other.a)[1])
        p = len(self.g)
        rng = np.random.default_rng(0)
        starts = [np.zeros(p)]
        for side in (self, other):  # where one side's b vanishes: the noise term is largest there
            starts.append(np.asarray(np.linalg.solve(side.a, side.g), dtype=np.float64))
        for _ in range(RANDOM_STARTS):
            z = rng.standard_normal(p)
            starts.append(0.9 * self.l1_radius * z / float(np.abs(z).sum()))
        loss = max(self._sup(self, other, logdet, starts), self._sup(other, self, -logdet, starts))
        return EventLoss(event.stage, event.kind, self.shift(other), event.sensitivity, loss, 0.0)


@dataclass(frozen=True)
class CentredObjectives:
    """Stage 2's objective at each centre of a public grid (``outcome_center: private``).

    Stage 2 runs on the released centre c̃, the same on D and D′ (adaptive composition conditions
    on it, :mod:`dpcausal.commands.two_stage.center`), so its loss is the worst over centres of
    the loss at a fixed centre; the audit evaluates it at AUDIT_CENTERS of [L, U] (the ends, where
    the winsorising at ±(U − L)/2 bites most, and the midpoint)."""

    parts: tuple[ObjectiveInput, ...]

    def privacy_loss(self, other: CentredObjectives, event: PrivacyEvent) -> EventLoss:
        """The worst centre's exact interior loss and gradient-map shift."""
        rows = [a.privacy_loss(b, event) for a, b in zip(self.parts, other.parts, strict=True)]
        return EventLoss(event.stage, event.kind, max(r.shift for r in rows), event.sensitivity,
                         max(r.epsilon_loss for r in rows), 0.0)


AUDIT_CENTERS = (0.0, 0.5, 1.0)
"""Where in [L, U] (as a share of U − L) the audit fixes a private centre for stage 2."""


def pre_noise(spec: TwoStageSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, Any]:
    """The stage-2 objective of ``frame`` (non-private; audit only), by the plan's stage, and with
    a private centre the centre's pre-noise mean (its objective at each of AUDIT_CENTERS)."""
    if spec.two_stage.noise != "gamma":
        raise SpecError("two_stage.noise: audit privacy covers noise: gamma (pure ε-DP) only; the "
                        "Gaussian variant's loss is random and needs a δ analysis (spec §10 T2)")
    setup = with_radius(build_setup(spec), plan.details)
    data = prepare(spec, setup, frame, spec.data.path)
    w = compute_weights(spec, setup, data)
    n = len(data.t)
    gamma = float(plan.details["gamma"])
    xw = data.x * w[:, None]
    ev = plan.event(OBJECTIVE_STAGE)
    a = 2.0 * (xw.T @ data.x) + n * gamma * np.eye(data.x.shape[1])

    def objective(t: FloatArray) -> ObjectiveInput:
        return ObjectiveInput(g=2.0 * (xw.T @ t), a=a, l1_radius=setup.l1_radius,
                              beta=1.0 / ev.noise_scale)

    if not setup.private_center:
        return {ev.stage: objective(data.t)}
    grid = [with_center(setup, setup.lower + f * (setup.upper - setup.lower))
            for f in AUDIT_CENTERS]
    return {center.STAGE: np.array([center.outcome_sum(data.y) / n]),
            ev.stage: CentredObjectives(tuple(objective(targets(s, data.y, data.a)) for s in grid))}


def output_vector(release: Release) -> FloatArray:
    """The released θ (in the mapped feature space), after the released centre if private."""
    rule = release.documents["rule.json"]
    theta = np.asarray(rule["theta"], dtype=np.float64)
    if rule["outcome_center"]["source"] != "private":
        return theta
    return np.concatenate([[float(rule["outcome_center"]["estimate"])], theta])


def without_plot(spec: TwoStageSpec) -> TwoStageSpec:
    """The audited spec: no figure (post-processing only, the released numbers are unchanged)."""
    return spec.model_copy(update={"two_stage": spec.two_stage.model_copy(update={"plot": False})})


ADAPTER = AuditAdapter(METHOD, "two_stage", synthesize, neighbours, pre_noise, output_vector,
                       audit_spec=without_plot)
"""two-stage's audit adapter (listed in :data:`dpcausal.commands.COMMANDS`)."""
"""(synthesize, neighbours, pre_noise, output_vector), in AuditAdapter's order."""
