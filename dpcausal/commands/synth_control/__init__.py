"""``synth-control``: differentially private synthetic control (DPSC_out; DPSC_obj uncertified).

Rho, Cummings & Misra (AISTATS 2023), Algorithm 2, with the errata of ``specs/synth_control.md``:
exact ridge closed form with (λ/2)I, the tight sensitivity √(2T0/λ) by default, a Gamma(d) radius for
the ℓ2-Laplace noise, and a step 2 that is ε2-DP in both variants. Privacy unit: one donor's whole
series (replace-one donor; n, T, T0 public). The target series is public and not protected.
"""
