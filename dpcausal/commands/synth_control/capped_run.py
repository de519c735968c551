"""The release of ``method: capped``: choose k donors, then release the average effect, the path
and the pre-period fit through the run's noise guard, each with its noise interval."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.synth_control import capped
from dpcausal.commands.synth_control.capped_plan import mechanisms_of, scales_of
from dpcausal.commands.synth_control.panel import PanelLayout, plain_value
from dpcausal.commands.synth_control.plot import plot_capped_png
from dpcausal.commands.synth_control.setup import COMMAND
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.intervals import add_interval_columns, interval_bounds, interval_record
from dpcausal.mechanisms import GaussianMechanism, LaplaceMechanism, NoiseGuard
from dpcausal.mechanisms.noise_law import event_halfwidth, law_label
from dpcausal.method import Release

FloatArray = np.ndarray
Mech = LaplaceMechanism | GaussianMechanism


def halfwidth(mech: Mech, alpha: float) -> float:
    """(1 − α) half-width of one released coordinate's noise (exact Laplace or Gaussian law)."""
    return event_halfwidth(mech.event(), alpha)


def law(mech: Mech) -> str:
    """The noise law in words, with its public scale."""
    return law_label(mech.event())


def run_capped(spec: SynthControlSpec, layout: PanelLayout, x_raw: FloatArray, y_raw: FloatArray,
               plan: PrivacyPlan, *, noise: NoiseGuard) -> Release:
    """Release the capped synthetic control (module docstring); every value is post-processing
    of the guard's draws and the public target, bounds and band."""
    sec = spec.synth_control
    scales = scales_of(spec, layout)
    mechs = mechanisms_of(spec, layout)
    t0, k = layout.t0, sec.k
    alpha = spec.accuracy.alpha
    prep = capped.prepare(x_raw, y_raw, scales, t0)
    private = mechs.choice is not None
    chosen = (np.asarray(noise.release(mechs.choice, -prep.d)) if private
              else capped.nearest(prep.d, k))
    slices = capped.block_slices(layout.h, sec.releases.path_blocks)
    values = capped.released_values(prep, chosen, k, t0, slices)
    lo_t, hi_t = prep.lo_t, prep.hi_t
    placebos = None
    if mechs.placebos is not None:
        pick = (None if mechs.placebo_choice is None else
                (lambda u: noise.release(mechs.placebo_choice, u)))
        _, effects = capped.placebo_values(x_raw, scales, t0, pick)
        placebos = np.asarray(noise.release(mechs.placebos, effects))
    del prep, x_raw

    y_post = y_raw[t0:]
    avg_bounds = (float(np.mean(lo_t[t0:])), float(np.mean(hi_t[t0:])))
    avg_cf = float(np.asarray(noise.release(mechs.average, values[capped.STAGE_AVERAGE]))[0])
    hw_avg = halfwidth(mechs.average, alpha)
    doc = _document(spec, layout, plan, scales, chosen if mechs.choice is not None else None)
    cf_rec = interval_record(avg_cf, hw_avg, alpha=alpha, law=law(mechs.average),
                             bounds=avg_bounds)
    doc["average_counterfactual"] = cf_rec
    mean_y = float(np.mean(y_post))
    eff_bounds = (mean_y - avg_bounds[1], mean_y - avg_bounds[0])
    doc["average_post_effect"] = interval_record(mean_y - avg_cf, hw_avg, alpha=alpha,
                                                 law=law(mechs.average), bounds=eff_bounds)
    rmspe_hat = None
    if mechs.fit is not None:
        raw = float(np.asarray(noise.release(mechs.fit, values[capped.STAGE_FIT]))[0])
        fit_rec = interval_record(raw, halfwidth(mechs.fit, alpha), alpha=alpha,
                                  law=law(mechs.fit), bounds=(0.0, scales.reach))
        doc["pre_period_rmspe"] = fit_rec
        rmspe_hat = (raw, mechs.fit)
        doc["average_post_effect"]["total_interval"] = _total_interval(
            mean_y - avg_cf, mechs.average, rmspe_hat, scales.reach, eff_bounds, alpha)
    table = _table(layout, y_raw, t0)
    if mechs.path is not None:
        released = np.asarray(noise.release(mechs.path, values[capped.STAGE_PATH]))
        table = _path_columns(table, t0, slices, released, lo_t, hi_t,
                              halfwidth(mechs.path, alpha))
        doc["path"] = {"values": len(slices), "law": law(mechs.path), "level": 1.0 - alpha,
                       "per_period": sec.releases.path_blocks is None}
    release = Release(documents={"effect.json": doc}, tables={"counterfactual": table})
    if placebos is not None:
        assert mechs.placebos is not None
        release.tables["placebos"], doc["placebos"] = _placebos(
            layout, placebos, halfwidth(mechs.placebos, alpha), scales,
            doc["average_post_effect"]["estimate"], law(mechs.placebos))
    if mechs.choice is not None:
        release.tables["weights"] = pd.DataFrame({
            "unit": [plain_value(u) for u in layout.donors], "weight": chosen / k})
    if spec.synth_control.plot:
        release.figures["synth_control.png"] = plot_capped_png(
            table, target=str(plain_value(layout.target)), epsilon=spec.privacy.epsilon,
            average=doc["average_post_effect"], bounds=(scales.lo, scales.hi),
            level=1.0 - alpha)
    release.summary.update({
        "average_post_effect": doc["average_post_effect"]["estimate"],
        "average_post_effect_interval": [doc["average_post_effect"]["interval"]["lo"],
                                         doc["average_post_effect"]["interval"]["hi"]],
        "n_donors": layout.n, "k": k, "donor_choice": scales.choice,
        "pre_periods": t0, "post_periods": layout.h,
    })
    return release


def _total_interval(effect: float, avg: LaplaceMechanism, fit: tuple[float, LaplaceMechanism],
                    reach: float, bounds: tuple[float, float], alpha: float) -> dict[str, Any]:
    """Noise plus model error of the average effect, by a union bound (α/2 + α/4 + α/4).

    The model error assumption: each post-period prediction error is normal with mean 0 and
    standard deviation at most the pre-period RMSPE σ (no drift after the treatment time); then
    their average is normal with sd ≤ σ (whatever their correlation), so it is within z_{1−α/8}·σ
    with probability ≥ 1 − α/4. σ is bounded by the released RMSPE's upper noise limit (α/4).
    """
    raw, fit_mech = fit
    sigma_hi = min(reach, max(0.0, raw + halfwidth(fit_mech, alpha / 2.0)))  # one-sided α/4
    hw = (halfwidth(avg, alpha / 2.0)
          + float(special.ndtri(1.0 - alpha / 8.0)) * sigma_hi)
    lo, hi = interval_bounds(np.array([effect]), hw, bounds)
    return {"lo": float(lo[0]), "hi": float(hi[0]), "level": 1.0 - alpha, "kind": "total",
            "bound": True,
            "law": ("noise (α/2) + model error (α/4), the RMSPE's noise (α/4); assumes the "
                    "post-period prediction errors are normal with sd at most the pre-period "
                    "RMSPE (no drift after the treatment)")}


def _placebos(layout: PanelLayout, released: FloatArray, hw: float,
              scales: capped.CappedScales, effect: float, noise_law: str
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The placebo table (clamped to ±(hi − lo)) and its summary: the target's rank among the
    placebos by absolute average effect (post-processing of released values only)."""
    r = scales.hi - scales.lo
    frame = pd.DataFrame({"unit": [plain_value(u) for u in layout.donors],
                          "placebo_effect": released})
    frame = add_interval_columns(frame, "placebo_effect", hw, bounds=(-r, r))
    shown = frame["placebo_effect"].to_numpy(dtype=np.float64)
    larger = int(np.sum(np.abs(shown) >= abs(effect)))
    return frame, {
        "count": len(shown), "law": noise_law, "halfwidth": hw,
        "placebos_at_least_as_large": larger,
        "rank_p_value": (1 + larger) / (len(shown) + 1),
        "note": ("the share of donors whose released placebo effect is at least as large in "
                 "magnitude as the target's released effect (the permutation p-value of "
                 "synthetic control), computed from noisy values: when the noise half-width is "
                 "not small next to the effects, it says little"),
    }


def _table(layout: PanelLayout, y_raw: FloatArray, t0: int) -> pd.DataFrame:
    return pd.DataFrame({
        "time": [plain_value(t) for t in layout.times],
        "period": ["pre"] * t0 + ["post"] * layout.h,
        "observed": y_raw,
    })


def _path_columns(table: pd.DataFrame, t0: int, slices: list[slice], released: FloatArray,
                  lo_t: FloatArray, hi_t: FloatArray, hw: float) -> pd.DataFrame:
    """counterfactual (+ noise interval, clamped to its block's public range) and effect."""
    n_t = len(table)
    raw = np.full(n_t, np.nan)
    blo, bhi = np.full(n_t, np.nan), np.full(n_t, np.nan)
    block = np.full(n_t, -1)
    for i, s in enumerate(slices):
        rows = np.arange(t0 + s.start, t0 + s.stop)
        raw[rows] = released[i]
        blo[rows], bhi[rows] = float(np.mean(lo_t[rows])), float(np.mean(hi_t[rows]))
        block[rows] = i
    out = table.copy()
    out["block"] = np.where(block >= 0, block, -1)
    out["counterfactual"] = raw
    lo, hi = interval_bounds(raw, hw, None)
    clamped = np.clip(raw, blo, bhi)
    post = ~np.isnan(raw)
    out["counterfactual"] = np.where(post, clamped, np.nan)
    out["counterfactual_noise_lo"] = np.where(post, np.clip(lo, blo, bhi), np.nan)
    out["counterfactual_noise_hi"] = np.where(post, np.clip(hi, blo, bhi), np.nan)
    out["counterfactual_clamped"] = post & (clamped != raw)
    obs = out["observed"].to_numpy(dtype=np.float64)
    out["effect"] = np.where(post, obs - out["counterfactual"], np.nan)
    out["effect_noise_lo"] = obs - out["counterfactual_noise_hi"]
    out["effect_noise_hi"] = obs - out["counterfactual_noise_lo"]
    return out


def _document(spec: SynthControlSpec, layout: PanelLayout, plan: PrivacyPlan,
              scales: capped.CappedScales, chosen: FloatArray | None) -> dict[str, Any]:
    sec = spec.synth_control
    d = plan.details
    doc: dict[str, Any] = {
        "command": COMMAND,
        "method": (f"capped: the average of k = {sec.k} donors nearest the target before the "
                   "treatment (a vertex of the capped simplex, cap 1/k), noise calibrated to each "
                   "released number"),
        "target": plain_value(layout.target),
        "treatment_time": plain_value(sec.treatment_time),
        "n_donors": layout.n, "pre_periods": layout.t0, "post_periods": layout.h,
        "k": sec.k, "donor_choice": scales.choice,
        "effect_definition": "observed target − synthetic control (the mean of the k chosen "
                             "donors), averaged over the post periods",
        "privacy": {
            "epsilon": spec.privacy.epsilon, "delta": plan.cost.delta, "dp_guarantee": True,
            "privacy_unit": sec.privacy_unit,
            "protects": plan.neighbouring["unit"],
            "not_protected": "the target's series (public)",
            "epsilon_by_release": {e.stage: e.epsilon for e in plan.events},
            "per_period_sensitivity": d["per_period_sensitivity"],
        },
    }
    if "weaker_than" in plan.neighbouring:
        doc["privacy"]["weaker_than"] = plan.neighbouring["weaker_than"]
    if scales.band is not None:
        doc["band"] = {"halfwidth": scales.band, "note": d["warning_band"]}
    if chosen is not None:
        doc["chosen_donors"] = [plain_value(u) for u, c in zip(layout.donors, chosen, strict=True)
                                if c > 0.5]
    else:
        doc["chosen_donors"] = ("not released: the k nearest donors are a deterministic function "
                                "of the data (use weights: private to release them)")
    return doc

