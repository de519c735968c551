"""``two-stage``: DP-2ERM (Lee & Chen) for individualized treatment rules.

Stage 1: covariate-balancing weights w ∈ nΔⁿ, computed WITHOUT noise and never released.
Stage 2: the weighted ITR regression (Eq. 6.1) over ‖θ‖₁ ≤ λ₁ with objective perturbation whose
noise and ridge are calibrated to how far all n weights can move when one row is replaced
(Thm 3.1/3.2 with the corrections of the spec's amendments). Only θ is released.
"""
