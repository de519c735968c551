"""Row splits on an engine: membership as a function of the GLOBAL row index only.

A split's membership mask is built on the client from the public row count and the split of
:mod:`dpcausal.commands.common.row_split` (by default a secret random permutation drawn for the run;
or a public seed), packed 8 rows a byte, and travels once with each partition's mapping task (inside
the curator's trust boundary, like the data); a batch reads the bits of its rows ``[start, start +
rows)``. So which half a row is in never depends on how the files are cut into batches or
partitions, and the engine's split is the in-memory one."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
Packed = npt.NDArray[np.uint8]


def pack(indices: npt.NDArray[np.intp], n_rows: int) -> Packed:
    """The packed membership mask of the global rows ``indices`` among ``n_rows``."""
    mask = np.zeros(n_rows, dtype=bool)
    mask[indices] = True
    return np.packbits(mask)


def members(bits: Packed, start: int, rows: int) -> BoolArray:
    """Membership of the global rows [start, start + rows) in the packed mask ``bits``."""
    lo = start // 8
    flags = np.unpackbits(bits[lo:(start + rows + 7) // 8])
    return flags[start - 8 * lo:start - 8 * lo + rows].astype(bool)
