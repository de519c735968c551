"""``select-policy``: release one policy from a public library by the exponential mechanism over
doubly robust (AIPW) utilities, with the nuisance learners' spillover certified.

"Double Robustness Is Not a Privacy Certificate: Sensitivity Spillover in Private Policy Selection"
(spec ``select_policy.md``): utility U(π) = Σ_{scoring block} ψ_π(Z; η̂(D_tr)); the naive Δ = 2B_ψ
is not private when η̂ is learned on the same data. Δ_cert = max{2B_ψ, n ρ*} with
ρ* = (1 + 1/ζ)β_μ + ζ⁻² R_{Y,μ} β_e from the learners' public replace-one stability bounds.
"""
