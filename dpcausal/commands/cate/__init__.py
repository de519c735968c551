"""``cate``: DP-CATE (Schröder, Melnychuk & Feuerriegel, ICLR 2025) with DP nuisances.

A split of the rows into D̃ (nuisances) and D (second stage), by a secret random permutation
(default; :mod:`dpcausal.commands.common.row_split`) or a public seed. Stage 1 on D̃: DP ℓ2-logistic
propensity and DP ridge outcome models per arm (Gaussian output perturbation). Stage 2 on D: R- or
DR-learner weights ρ and pseudo-outcomes φ, weighted Gaussian-kernel ridge regression; release by
``function`` mode (Thm 3, one Gaussian-process path, noise = max(printed, corrected) formula) or
``queries`` mode (Thm 1, finite-query Gaussian noise calibrated to the influence-function bound;
asymptotic guarantee). Spec: ``specs/cate.md`` with errata E1, E3, E4 and its amendments.
"""
