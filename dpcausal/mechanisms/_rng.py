"""The generator for privacy noise: ChaCha20, a cryptographically secure stream cipher.

A statistical generator such as PCG64 seeded from OS entropy is not enough for privacy noise: its
state is small and recoverable from its outputs, and then every later (or earlier) draw is
predictable and the noise can be subtracted. ChaCha20 (20 rounds, a 256-bit key, Bernstein 2008)
is the stream cipher of TLS and of the Linux kernel's CSPRNG; its output is computationally
indistinguishable from random without the key, which is taken from ``os.urandom`` and never
stored. ``randomgen`` (by numpy.random's author) provides it as a numpy ``BitGenerator``, so every
numpy distribution sampler draws from it unchanged.
"""

from __future__ import annotations

import os

import numpy as np

CHACHA_ROUNDS = 20
"""The standard (full-strength) number of ChaCha rounds; fewer rounds trade security for speed."""

NOISE_SOURCE = "chacha20/os-entropy"
"""The receipt's ``rng`` for real runs: ChaCha20 keyed with 256 bits from ``os.urandom``."""

TEST_NOISE_SOURCE = "chacha20/seeded-test"
"""The receipt's ``rng`` for ``--test-noise-seed`` runs (reproducible noise, no DP guarantee)."""


def noise_generator(test_seed: int | tuple[int, ...] | None = None) -> np.random.Generator:
    """Return the generator privacy noise is drawn from (only :mod:`dpcausal.mechanisms` calls it).

    Parameters
    ----------
    test_seed
        ``None`` (always, outside tests): a ChaCha20 generator keyed directly with 256 bits from
        ``os.urandom``, so nobody, including the operator, can reproduce and subtract the noise.
        An integer (or a tuple of them) makes the noise reproducible (the same ChaCha20 stream,
        keyed through numpy's ``SeedSequence``); a run that uses it has **no** DP guarantee and its
        receipt says so (``"rng": "chacha20/seeded-test"``, ``"dp_guarantee": false``).
    """
    from randomgen import ChaCha  # lazy (issue 24): a plan draws no noise; ~0.04 CPU-s to import

    if test_seed is None:
        key = int.from_bytes(os.urandom(32), "little")
        return np.random.Generator(ChaCha(key=key, counter=0, rounds=CHACHA_ROUNDS))
    return np.random.Generator(ChaCha(seed=np.random.SeedSequence(test_seed), rounds=CHACHA_ROUNDS))


def noise_source(test_seed: int | None) -> str:
    """The receipt's ``rng`` entry for a run with this ``test_seed``."""
    return NOISE_SOURCE if test_seed is None else TEST_NOISE_SOURCE
