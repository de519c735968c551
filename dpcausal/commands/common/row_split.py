"""The two-part row split of cate and select-policy (DESIGN §1.8: splits do not trust the row
order), shared by the in-memory runs, the engines (:mod:`dpcausal.engine.split` packs the same
membership) and the audit adapters.

Notes
-----
Neighbouring relation. With ``kind: random`` the first part is a uniformly random m-subset of the
rows — the first m entries of a uniformly random permutation drawn from ChaCha20 keyed by 256 bits
of OS entropy (:func:`dpcausal.mechanisms.secret.secret_permutation`), never stored, logged or
released. The release's distribution then depends on the records only as
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

``kind: id-hash`` ranks the rows by t(row) = (HMAC-SHA256_k(id), r) with a 256-bit key k and
independent 64-bit tie-breaks r, both drawn for the run from the same secret generator and never
stored, and takes the m smallest. With distinct ids, the tags of the n rows are (computationally)
i.i.d. uniform whatever the ids are, so the first part is a uniformly random m-subset: exactly the
law of ``random``, and the coupling above applies (the replacing record takes the replaced one's
tag). The split is a function of the ids, not of the positions, so it does not depend on the row
order; equal ids share a tag and stay together (up to the boundary). It is unlinkable across runs
(a fresh key each time). A *public* key is not offered: membership would then be a known function
of each id, the replacing record's tag would differ from the replaced one's, and with exact part
sizes one other record could cross the boundary. If the ids are not distinct, a replacing record
whose id equals another row's id shares that row's tag, which can also shift one other record
across the boundary: the receipt states the assumption that ids are distinct
(:data:`dpcausal.spec.split.ID_ASSUMPTION`).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from hashlib import sha256
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.errors import SpecError
from dpcausal.mechanisms.secret import secret_key, secret_permutation, secret_uint64
from dpcausal.spec.split import ORDER_ASSUMPTION, RowSplit

IntArray = npt.NDArray[np.intp]
AUDIT_SEED = 0
"""The permutation an audit conditions on for ``kind: random`` (:func:`for_audit`)."""


def id_hash_order(ids: Sequence[Any], key: bytes) -> IntArray:
    """Row indices sorted by (HMAC-SHA256_key(str(id)) as a 64-bit integer, a secret tie-break)."""
    tags = np.fromiter(
        (int.from_bytes(hmac.new(key, str(v).encode("utf-8"), sha256).digest()[:8], "big")
         for v in ids), dtype=np.uint64, count=len(ids))
    return np.lexsort((secret_uint64(len(ids)), tags)).astype(np.intp)


def _order(split: RowSplit, n_rows: int, ids: Sequence[Any] | None) -> IntArray:
    """The row order a non-``index`` split ranks rows by (fresh secret key or permutation per call)."""
    if split.kind == "id-hash":
        if ids is None or len(ids) != n_rows:
            raise ValueError("an id-hash split needs the id column's value of every row")
        return id_hash_order(ids, secret_key())
    if split.kind == "random":
        return secret_permutation(n_rows)
    return np.random.default_rng(split.seed).permutation(n_rows).astype(np.intp)


def first_part(split: RowSplit, n_rows: int, m: int,
               ids: Sequence[Any] | None = None) -> IntArray:
    """The sorted row indices of the first part (m of the n_rows rows); the rest is the second.

    ``random``: a fresh secret permutation for every call (call it once per run). ``id-hash``: the
    m rows with the smallest keyed hashes of ``ids`` (the split's id column, one per row), under a
    fresh secret key. ``seeded``: the first m entries of
    ``np.random.default_rng(seed).permutation(n_rows)``. ``index``: rows 0 … m − 1.
    """
    if split.kind == "index":
        return np.arange(m, dtype=np.intp)
    order = _order(split, n_rows, ids)
    return np.sort(order[:m]).astype(np.intp)


def parts(split: RowSplit, n_rows: int, m: int,
          ids: Sequence[Any] | None = None) -> tuple[IntArray, IntArray]:
    """(first part, second part): sorted row indices, disjoint, covering every row."""
    first = first_part(split, n_rows, m, ids)
    mask = np.ones(n_rows, dtype=bool)
    mask[first] = False
    return first, np.flatnonzero(mask)


def refuse_on_engine(split: RowSplit, engine: object | None, field: str) -> None:
    """SpecError (before any row is read) for an ``id-hash`` split with an engine: the engines
    build the split's membership from the public row count alone."""
    if split.kind == "id-hash" and engine is not None:
        raise SpecError(f"{field}.kind: id-hash runs in memory only (the engines place rows by "
                        "their global index); use kind: random (also independent of the row "
                        "order) on an engine, or remove the engine section (nothing was read or "
                        "spent)")


def folds(split: RowSplit, n_rows: int, k: int, ids: Sequence[Any] | None = None) -> IntArray:
    """The fold (0 … k − 1) of every row: the rows at positions f, f + k, f + 2k, … of the order
    :func:`first_part` uses (``random``: a fresh secret permutation, call it once per run;
    ``id-hash``: the keyed hashes of ``ids`` under a fresh secret key; ``seeded``: from the seed;
    ``index``: the file's order). Fold f has len(range(f, n_rows, k)) rows, a public size."""
    pos = np.arange(n_rows, dtype=np.intp) % k
    if split.kind == "index":
        return pos
    order = _order(split, n_rows, ids)
    out = np.empty(n_rows, dtype=np.intp)
    out[order] = pos
    return out


def row_order(split: RowSplit) -> str:
    """The receipt's statement of what the neighbouring relation assumes about the row order."""
    if split.kind == "random":
        return ("irrelevant: neighbours are data sets whose records differ in one, as multisets "
                "(the split is a secret random permutation)")
    if split.kind == "id-hash":
        return ("irrelevant: neighbours are data sets whose records differ in one, as multisets "
                "(the split is a secret keyed hash of the distinct ids)")
    return f"assumed independent of the data ({split.kind} split): {ORDER_ASSUMPTION}"


def for_audit(split: RowSplit) -> RowSplit:
    """The split an audit's gray-box computation uses: a random (or id-hash) split is replaced by
    one fixed permutation (``AUDIT_SEED``), shared by D and D′ (with distinct ids an id-hash split
    is a uniformly random subset, the law of ``random``).

    For the in-place neighbours the audit generates (one row replaced at its position), a shared
    permutation is exactly the coupling of the module's Notes, so the worst loss over pairs bounds
    the random split's loss; the black-box runs on D and D′ use it too, for the same reason.
    """
    if split.kind in ("random", "id-hash"):
        return RowSplit(kind="seeded", seed=AUDIT_SEED)
    return split
