"""The two-part row split of cate and select-policy (DESIGN §1.8: splits do not trust the row
order), shared by the in-memory runs, the engines (:mod:`dpcausal.engine.split` packs the same
membership) and the audit adapters.

Notes
-----
Neighbouring relation. With ``kind: random`` the first part is a uniformly random m-subset of the
rows — the first m entries of a uniformly random permutation drawn from 256 bits of OS entropy,
never stored, logged or released. The release's distribution then depends on the records only as
a multiset: D and D′ that differ in one record (the other n − 1 equal as multisets, whatever the
order of either file) are coupled by a bijection of permutations that keeps every unchanged
record, and the replaced/replacing pair, in the same part. For each coupled pair of splits the
mechanisms' guarantees hold as for a fixed split with the replaced record staying in its part, so
the mixture over the permutation is (ε, δ)-DP for multiset neighbours: P(M(D) ∈ S) =
E_σ P(M_σ(D) ∈ S) ≤ E_σ [e^ε P(M_σ′(D′) ∈ S) + δ] = e^ε P(M(D′) ∈ S) + δ.
``seeded`` and ``index`` are functions of the row position: the same argument needs D and D′ to
differ in one row at the same position, which a file sorted by a value violates (one changed
record shifts the others; measured privacy loss 8.6 against a claimed ε = 1). They are kept for
reproducibility behind an explicit option whose receipt states the assumption.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt

from dpcausal.spec.split import ORDER_ASSUMPTION, RowSplit

IntArray = npt.NDArray[np.intp]
AUDIT_SEED = 0
"""The permutation an audit conditions on for ``kind: random`` (:func:`for_audit`)."""


def _secret_generator() -> np.random.Generator:
    """A generator seeded by 256 bits from ``os.urandom``: nobody can reproduce its draws."""
    entropy = int.from_bytes(os.urandom(32), "little")
    return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(entropy)))


def first_part(split: RowSplit, n_rows: int, m: int) -> IntArray:
    """The sorted row indices of the first part (m of the n_rows rows); the rest is the second.

    ``random``: a fresh secret permutation for every call (call it once per run). ``seeded``: the
    first m entries of ``np.random.default_rng(seed).permutation(n_rows)``. ``index``: rows
    0 … m − 1.
    """
    if split.kind == "index":
        return np.arange(m, dtype=np.intp)
    rng = (_secret_generator() if split.kind == "random"
           else np.random.default_rng(split.seed))
    return np.sort(rng.permutation(n_rows)[:m]).astype(np.intp)


def parts(split: RowSplit, n_rows: int, m: int) -> tuple[IntArray, IntArray]:
    """(first part, second part): sorted row indices, disjoint, covering every row."""
    first = first_part(split, n_rows, m)
    mask = np.ones(n_rows, dtype=bool)
    mask[first] = False
    return first, np.flatnonzero(mask)


def row_order(split: RowSplit) -> str:
    """The receipt's statement of what the neighbouring relation assumes about the row order."""
    if split.kind == "random":
        return ("irrelevant: neighbours are data sets whose records differ in one, as multisets "
                "(the split is a secret random permutation)")
    return f"assumed independent of the data ({split.kind} split): {ORDER_ASSUMPTION}"


def for_audit(split: RowSplit) -> RowSplit:
    """The split an audit's gray-box computation uses: a random split is replaced by one fixed
    permutation (``AUDIT_SEED``), shared by D and D′.

    For the in-place neighbours the audit generates (one row replaced at its position), a shared
    permutation is exactly the coupling of the module's Notes, so the worst loss over pairs bounds
    the random split's loss; the black-box runs on D and D′ use it too, for the same reason.
    """
    if split.kind == "random":
        return RowSplit(kind="seeded", seed=AUDIT_SEED)
    return split
