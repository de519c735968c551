"""Regenerate the select-policy sample data (seeded, so the files are reproducible).

    python sample_data/make_select_policy_data.py

select_policy_obs.csv        3,000 observational rows from the paper's rare-region DGP (App. G.1) on
                             20 simulated ACIC-like covariates x1..x20 (the paper's encoding recipe:
                             standardised numerics, one-hot categoricals; public bounds [-3, 3]),
                             a binary action A ∈ {0, 1} and an outcome Y ∈ [0, 1]. Also two
                             columns dr_treated / dr_control: each row's DR score under the frozen
                             public nuisance model below (record-local, |score| ≤ 11), for the
                             `fixed` regime example.
select_policy_public.csv     2,000 more rows of the same design, treated as public.
select_policy_nuisance.json  a public nuisance model (certified ridge + logistic, λ = 50) fit on
                             select_policy_public.csv only: the `frozen` regime's model file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from select_policy_sim import RareRegionDGP, simulated_covariates

from dpcausal.commands.select_policy.scores import dr_gammas, fit_nuisance
from dpcausal.learners import CertifiedLogistic, CertifiedRidge, UnitBoxFeatures

HERE = Path(__file__).parent
D = 20
NAMES = [f"x{j + 1}" for j in range(D)]


def main() -> None:
    """Write every sample file."""
    x_pool, q95 = simulated_covariates(20261126, D)
    dgp = RareRegionDGP(D, q95)
    rng = np.random.default_rng(7)
    idx = rng.permutation(x_pool.shape[0])
    fmap = UnitBoxFeatures(tuple(NAMES), np.full(D, -3.0), np.full(D, 3.0))
    frames = {}
    for name, rows in (("obs", idx[:3000]), ("public", idx[3000:])):
        x = x_pool[rows]
        a, y = dgp.sample(x, rng)
        frame = pd.DataFrame(x.round(6), columns=NAMES)
        frame["A"] = a
        frame["Y"] = y.round(6)
        frames[name] = frame
    pub = frames["public"]
    nuis = fit_nuisance(fmap, CertifiedRidge(50.0, (0.0, 1.0), (0.0, 1.0)),
                        CertifiedLogistic(50.0, 0.1), pub[NAMES].to_numpy(),
                        pub["A"].to_numpy() == 1, pub["Y"].to_numpy())
    obs = frames["obs"]
    mu0, mu1, e1 = nuis.predict(obs[NAMES].to_numpy())
    g0, g1 = dr_gammas(mu0, mu1, e1, obs["A"].to_numpy() == 1, obs["Y"].to_numpy())
    obs["dr_treated"] = g1.round(6)
    obs["dr_control"] = g0.round(6)
    obs.to_csv(HERE / "select_policy_obs.csv", index=False)
    pub.to_csv(HERE / "select_policy_public.csv", index=False)
    doc = nuis.to_document()
    doc["note"] = ("fit on sample_data/select_policy_public.csv only (public rows); certified ridge "
                   "and logistic, lambda 50, features clipped to [-3, 3] and rescaled to [-1, 1]")
    (HERE / "select_policy_nuisance.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
