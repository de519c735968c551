"""The privacy plan of ``method: capped``, from the spec and the panel's public structure alone."""

from __future__ import annotations

from typing import Any

from dpcausal.accounting.plan import Guarantee, PredictedAccuracy, PrivacyPlan
from dpcausal.commands.synth_control import capped
from dpcausal.commands.synth_control.panel import PanelLayout
from dpcausal.commands.synth_control.setup import COMMAND, neighbouring
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import SpecError
from dpcausal.mechanisms.noise_law import event_halfwidth, law_label

AVERAGE = "average_post_effect"
PATH = "counterfactual"
FIT = "pre_period_rmspe"
PLACEBO = "placebo_effect"


def scales_of(spec: SynthControlSpec, layout: PanelLayout) -> capped.CappedScales:
    """The public scales of this spec: bounds, band, k, the privacy unit and the donor choice."""
    sec = spec.synth_control
    assert spec.bounds.outcome is not None  # OutcomeMap.from_spec refused a missing bound
    lo, hi = (float(v) for v in spec.bounds.outcome)
    if sec.k > layout.n:
        raise SpecError(f"synth_control.k: {sec.k} donors cannot be averaged out of the panel's "
                        f"{layout.n}; lower k (the donor count is public)")
    person = None
    if sec.individual is not None:
        person = sec.individual.contribution / sec.individual.population
    choice: capped.Choice
    if sec.weights == "auto":
        choice = "private" if sec.privacy_unit == "individual" else "nearest"
    else:
        choice = "private" if sec.weights == "private" else "nearest"
    band = None if sec.band is None else sec.band * (hi - lo)
    return capped.CappedScales(lo, hi, band, sec.k, person, choice)


def stage_epsilons(spec: SynthControlSpec, choice: capped.Choice) -> dict[str, float]:
    """ε of each released number: the shares of the enabled releases, normalised to ε."""
    sec = spec.synth_control
    shares = {capped.STAGE_AVERAGE: sec.shares.average}
    if choice == "private":
        shares[capped.STAGE_CHOICE] = sec.shares.weights
    if sec.releases.path:
        shares[capped.STAGE_PATH] = sec.shares.path
    if sec.releases.fit:
        shares[capped.STAGE_FIT] = sec.shares.fit
    if sec.releases.placebos:
        shares[capped.STAGE_PLACEBOS] = sec.shares.placebos
        if choice == "private":
            shares[capped.STAGE_PLACEBO_CHOICE] = sec.shares.placebo_choice
    total = sum(shares.values())
    eps = spec.privacy.epsilon
    return {stage: eps * w / total for stage, w in shares.items()}


def mechanisms_of(spec: SynthControlSpec, layout: PanelLayout) -> capped.CappedMechanisms:
    """The mechanisms of this release (the plan's events and the run's draws)."""
    sec = spec.synth_control
    scales = scales_of(spec, layout)
    epsilons = stage_epsilons(spec, scales.choice)
    delta = spec.privacy.delta
    blocks = len(capped.block_slices(layout.h, sec.releases.path_blocks))
    kind = None
    if capped.STAGE_PATH in epsilons:
        if sec.path_noise == "gaussian" and delta <= 0.0:
            raise SpecError("synth_control.path_noise: gaussian needs privacy.delta > 0; set a "
                            "small δ (e.g. 1e-6) or use path_noise: laplace")
        kind = capped.resolve_path_noise(sec.path_noise, epsilons[capped.STAGE_PATH], delta,
                                         scales, blocks)
    if sec.releases.placebos and layout.n < 2:
        raise SpecError("synth_control.releases.placebos: placebos need at least 2 donors")
    return capped.build_mechanisms(scales, epsilons, delta, kind, blocks, layout.n)


def predicted(mechs: capped.CappedMechanisms, alpha: float) -> tuple[PredictedAccuracy, ...]:
    """Predicted (1 − α) noise half-width of every released number, in outcome units (exact:
    one Laplace or Gaussian coordinate each; the path's value is that of one period's block)."""
    out = []
    for name, mech in ((AVERAGE, mechs.average), (PATH, mechs.path), (FIT, mechs.fit),
                       (PLACEBO, mechs.placebos)):
        if mech is None:
            continue
        ev = mech.event()
        out.append(PredictedAccuracy(name, "outcome units", event_halfwidth(ev, alpha), alpha,
                                     "noise", law_label(ev), headline=name == AVERAGE))
    return tuple(out)


def plan_capped(spec: SynthControlSpec, layout: PanelLayout) -> PrivacyPlan:
    """The plan of ``method: capped`` (public inputs only)."""
    sec = spec.synth_control
    mechs = mechanisms_of(spec, layout)
    scales = scales_of(spec, layout)
    events = tuple(m.event() for m in mechs.all())
    lo, hi = scales.lo, scales.hi
    details: dict[str, Any] = {
        **layout.to_dict(), "method": "capped", "k": sec.k, "cap": 1.0 / sec.k,
        "donor_choice": scales.choice, "privacy_unit": sec.privacy_unit,
        "band_halfwidth": scales.band, "cell_width": scales.width,
        "cell_change": scales.cell_change, "per_period_sensitivity": scales.per_period,
        "path_values": mechs.blocks if mechs.path is not None else 0,
        "path_noise": None if mechs.path is None else mechs.path.event().kind,
    }
    accuracy = predicted(mechs, spec.accuracy.alpha)
    head = accuracy[0]
    details["note_average_effect"] = (
        f"the average post effect will be within ±{head.halfwidth:.4g} (outcome units) of its "
        f"value without noise with probability {1 - head.alpha:g}; compare it with the effect "
        f"you hope to see and with the outcome's range {hi - lo:g}")
    if scales.band is not None:
        details["warning_band"] = (
            f"band: donor values are clipped to the target ± {scales.band:.4g}, so no effect "
            f"larger than {scales.band:.4g} in magnitude can be found; an effect near that size "
            "is shrunk toward it")
    if sec.privacy_unit == "individual" and scales.choice == "nearest":
        details["warning_choice"] = (
            "weights: nearest under privacy_unit: individual: one person can swap a donor in or "
            "out of the k, so the noise is sized to a whole donor cell (use weights: private)")
    assumptions = {
        "outcome_bounds": [lo, hi], "clipped": True,
        "band": None if sec.band is None else {"fraction_of_range": sec.band,
                                               "halfwidth": scales.band,
                                               "centre": "the public target's value at each "
                                                         "period"},
        "target_public": True,
        "donor_list": "public: " + ("synth_control.donors" if sec.donors is not None
                                    else "every unit except the target"),
        "panel_structure_public": "unit ids, periods, n, T, T0 (read from the unit/time "
                                  "columns before any outcome value)",
        "composition": "sequential over the stages (they read the same donors); each later "
                       "stage's sensitivity holds for every earlier output (adaptive)",
    }
    if sec.individual is not None:
        assumptions["individual"] = {
            "contribution": sec.individual.contribution,
            "population": sec.individual.population,
            "cell_change": scales.person_change,
            "each_person_in_one_unit": True,
        }
    guarantee: Guarantee = "approximate" if any(e.delta > 0 for e in events) else "pure"
    return PrivacyPlan(command=COMMAND, events=events, neighbouring=neighbouring(spec),
                       guarantee=guarantee, dp_guarantee=True, assumptions=assumptions,
                       details=details, accuracy=accuracy)
