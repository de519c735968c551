"""The one factory for *non-private* randomness (splits, public random features, simulations).

Privacy noise never comes from here: methods release values through the run's
:class:`dpcausal.mechanisms.NoiseGuard`, which draws from ChaCha20 keyed by OS entropy
(:mod:`dpcausal.mechanisms._rng`). ``--seed`` reaches only this function.
"""

from __future__ import annotations

import numpy as np


def make_rng(seed: int | None) -> np.random.Generator:
    """Return a generator for public randomness; ``None`` seeds it from OS entropy."""
    return np.random.default_rng(seed)
