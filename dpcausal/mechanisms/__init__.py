"""Privacy mechanisms: the only place in dpcausal that draws privacy noise.

Each mechanism is a frozen object: its parameters, ``event()`` (the cost, computed without data) and
``release(value, *, rng)``. Methods never call ``release`` themselves: they ask the run's
:class:`NoiseGuard` (built from the plan) to release through a mechanism, and the guard draws from
the ChaCha20 generator of :mod:`dpcausal.mechanisms._rng`.
"""

from dpcausal.mechanisms.exponential import ExponentialMechanism
from dpcausal.mechanisms.gaussian import GaussianMechanism, analytic_gaussian_sigma
from dpcausal.mechanisms.gaussian_process import GaussianProcessMechanism, GaussianProcessPath
from dpcausal.mechanisms.guard import Draw, NoiseGuard, NoiseGuardError
from dpcausal.mechanisms.l2_laplace import L2LaplaceMechanism
from dpcausal.mechanisms.laplace import LaplaceMechanism
from dpcausal.mechanisms.objective import ObjectivePerturbation
from dpcausal.mechanisms.subset_exponential import (
    SubsetExponentialMechanism,
    SubsetSelectionFamily,
)

__all__ = [
    "Draw",
    "ExponentialMechanism",
    "GaussianMechanism",
    "GaussianProcessMechanism",
    "GaussianProcessPath",
    "L2LaplaceMechanism",
    "LaplaceMechanism",
    "NoiseGuard",
    "NoiseGuardError",
    "ObjectivePerturbation",
    "SubsetExponentialMechanism",
    "SubsetSelectionFamily",
    "analytic_gaussian_sigma",
]
