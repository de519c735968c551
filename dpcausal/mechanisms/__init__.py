"""Privacy mechanisms: the only place in dpcausal that draws privacy noise.

Each mechanism is a frozen object: its parameters, ``event()`` (the cost, computed without data) and
``release(value, *, rng)``. The generator for privacy noise comes from :func:`noise_generator`.
"""

from dpcausal.mechanisms._rng import noise_generator
from dpcausal.mechanisms.exponential import ExponentialMechanism
from dpcausal.mechanisms.gaussian import GaussianMechanism, analytic_gaussian_sigma
from dpcausal.mechanisms.gaussian_process import GaussianProcessMechanism, GaussianProcessPath
from dpcausal.mechanisms.l2_laplace import L2LaplaceMechanism
from dpcausal.mechanisms.laplace import LaplaceMechanism

__all__ = [
    "ExponentialMechanism",
    "GaussianMechanism",
    "GaussianProcessMechanism",
    "GaussianProcessPath",
    "L2LaplaceMechanism",
    "LaplaceMechanism",
    "analytic_gaussian_sigma",
    "noise_generator",
]
