"""Secret randomness that is not noise: the permutation and the key of a run's row split.

A row split that does not trust the row order (DESIGN §1.8) is a function of a secret drawn for the
run: a uniformly random permutation (``split.kind: random``) or an HMAC key (``split.kind:
id-hash``). Both come from the same ChaCha20 generator keyed by 256 bits of OS entropy as the
privacy noise (:mod:`dpcausal.mechanisms._rng`), are never stored, logged or released, and are not
privacy *events* (they add no noise; the split's privacy argument is a coupling of the mechanisms
that follow, :mod:`dpcausal.commands.common.row_split`), so they do not go through the noise guard.

A ``--test-noise-seed`` run (no DP guarantee; its receipt says so) draws its secrets, like its noise,
from the test seed (:func:`seeded_secrets`), so that the whole run is reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import numpy.typing as npt

from dpcausal.mechanisms._rng import noise_generator

KEY_BYTES = 32
"""256-bit HMAC keys."""

_TEST_SEED: ContextVar[int | None] = ContextVar("dpcausal_secret_test_seed", default=None)
"""The test seed of the ``--test-noise-seed`` run in progress (None: OS entropy, always outside
tests); set only by :func:`seeded_secrets`."""

_PERMUTATION, _KEY, _TIE_BREAKS = 1, 2, 3
"""Distinct streams of a seeded run's secrets (mixed into the test seed)."""


@contextmanager
def seeded_secrets(test_seed: int | None) -> Iterator[None]:
    """Within the block, draw the secrets from ``test_seed`` (``None``: from OS entropy, as always
    outside tests). Only a ``--test-noise-seed`` run, which has no DP guarantee, passes a seed."""
    token = _TEST_SEED.set(test_seed)
    try:
        yield
    finally:
        _TEST_SEED.reset(token)


def _generator(stream: int) -> np.random.Generator:
    seed = _TEST_SEED.get()
    return noise_generator(None if seed is None else (seed, stream))


def secret_permutation(n: int) -> npt.NDArray[np.intp]:
    """A uniformly random permutation of 0 … n − 1 from a fresh OS-entropy-keyed ChaCha20."""
    return _generator(_PERMUTATION).permutation(n).astype(np.intp)


def secret_key() -> bytes:
    """A fresh 256-bit key from a fresh OS-entropy-keyed ChaCha20 (never stored)."""
    return _generator(_KEY).bytes(KEY_BYTES)


def secret_uint64(n: int) -> npt.NDArray[np.uint64]:
    """n independent uniform 64-bit integers from a fresh OS-entropy-keyed ChaCha20."""
    return _generator(_TIE_BREAKS).integers(0, 2**64, size=n, dtype=np.uint64)
