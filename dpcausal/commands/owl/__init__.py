"""``owl``: differentially private outcome weighted learning (DP-wERM with output perturbation).

Giddens et al. (2023), "A Differentially Private Weighted Empirical Risk Minimization Procedure and
its Application to Outcome Weighted Learning", Algorithm 1 and Corollary 1, with the spec's errata:
R(θ) = ½‖θ‖² (E1), Gamma shape d = dim θ (E15), public outcome shift (P1/E8), C = 0 only (E3/E4).
"""
