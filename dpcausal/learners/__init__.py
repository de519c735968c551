"""Certified nuisance learners shared by methods.

Deterministic ℓ2-regularised ERM learners (ridge per arm, ℓ2-logistic) on features clipped to public
bounds, each with a public replace-one *prediction-stability* certificate β: for every pair of
training sets of the same size m that differ in one record, sup_x |ĝ_S(x) − ĝ_S′(x)| ≤ β.
"""

from dpcausal.learners.certificate import SpilloverCertificate, certify_spillover
from dpcausal.learners.features import UnitBoxFeatures
from dpcausal.learners.logistic import CertifiedLogistic, LogisticFit
from dpcausal.learners.ridge import CertifiedRidge, RidgeFit

__all__ = [
    "CertifiedLogistic",
    "CertifiedRidge",
    "LogisticFit",
    "RidgeFit",
    "SpilloverCertificate",
    "UnitBoxFeatures",
    "certify_spillover",
]
