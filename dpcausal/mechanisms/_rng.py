"""The generator for privacy noise."""

from __future__ import annotations

import os

import numpy as np


def noise_generator(test_seed: int | None = None) -> np.random.Generator:
    """Return the generator privacy noise is drawn from.

    Parameters
    ----------
    test_seed
        ``None`` (always, outside tests): seed a PCG64DXSM generator with 256 bits from
        ``os.urandom``, so nobody, including the operator, can reproduce and subtract the noise.
        An integer makes the noise reproducible; a run that uses it has **no** DP guarantee and its
        receipt says so (``"rng": "seeded-test"``, ``"dp_guarantee": false``).
    """
    if test_seed is None:
        entropy = int.from_bytes(os.urandom(32), "little")
        return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(entropy)))
    return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(test_seed)))
