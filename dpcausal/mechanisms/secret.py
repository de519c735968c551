"""Secret randomness that is not noise: the permutation and the key of a run's row split.

A row split that does not trust the row order (DESIGN §1.8) is a function of a secret drawn for the
run: a uniformly random permutation (``split.kind: random``) or an HMAC key (``split.kind:
id-hash``). Both come from the same ChaCha20 generator keyed by 256 bits of OS entropy as the
privacy noise (:mod:`dpcausal.mechanisms._rng`), are never stored, logged or released, and are not
privacy *events* (they add no noise; the split's privacy argument is a coupling of the mechanisms
that follow, :mod:`dpcausal.commands.common.row_split`), so they do not go through the noise guard.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpcausal.mechanisms._rng import noise_generator

KEY_BYTES = 32
"""256-bit HMAC keys."""


def secret_permutation(n: int) -> npt.NDArray[np.intp]:
    """A uniformly random permutation of 0 … n − 1 from a fresh OS-entropy-keyed ChaCha20."""
    return noise_generator().permutation(n).astype(np.intp)


def secret_key() -> bytes:
    """A fresh 256-bit key from a fresh OS-entropy-keyed ChaCha20 (never stored)."""
    return noise_generator().bytes(KEY_BYTES)


def secret_uint64(n: int) -> npt.NDArray[np.uint64]:
    """n independent uniform 64-bit integers from a fresh OS-entropy-keyed ChaCha20."""
    return noise_generator().integers(0, 2**64, size=n, dtype=np.uint64)
