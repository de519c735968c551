"""Treatment columns: match the spec's public arm labels (two, or K ≥ 3), refuse anything else."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.errors import DataError
from dpcausal.preprocess.cells import label_matches
from dpcausal.spec.arms import MultiArms
from dpcausal.spec.base import BinaryArms

if TYPE_CHECKING:
    import pandas as pd


def treated_mask(col: pd.Series, arms: BinaryArms | MultiArms, *, path: Path | str | None, column: str,
                 command: str) -> npt.NDArray[np.bool_]:
    """True for the treated arm, False for control; refuses rows holding neither label.

    Rows are refused, not dropped: dropping a row because of its own value would change n and the
    neighbouring relation the sensitivity was derived under. The message names the first bad row
    but never echoes its value.
    """
    treated = label_matches(col, arms.treated)
    other = ~(treated | label_matches(col, arms.control_label()))
    if other.any():
        first = int(np.flatnonzero(other)[0])
        raise DataError(
            f"{path}: column '{column}' has {int(other.sum())} value(s) that are neither the "
            f"treated value {arms.treated!r} nor the control value {arms.control_label()!r} "
            f"(first at data row {first + 1}); {command} needs a binary treatment: collapse the "
            f"arms, or set {arms.section}.treated/control"
        )
    return treated


def arm_codes(col: pd.Series, arms: MultiArms, *, path: Path | str | None,
              column: str) -> npt.NDArray[np.intp]:
    """Each row's index in the section's declared ``arms``; refuses rows holding none of them.

    Rows are refused, not dropped (dropping would change n and the neighbouring relation); the
    message names the first bad row but never echoes its value. The data checks of the pipeline
    refuse such rows first, with every bad cell of the file.
    """
    codes = np.full(len(col), -1, dtype=np.intp)
    for i, label in enumerate(arms.labels()):
        codes[label_matches(col, label) & (codes < 0)] = i
    bad = codes < 0
    if bad.any():
        sec = arms.section
        raise DataError(
            f"{path}: column '{column}' has {int(bad.sum())} value(s) that are not one of "
            f"{sec}.arms {list(arms.labels())!r} (first at data row "
            f"{int(np.flatnonzero(bad)[0]) + 1}); recode the column, or list every arm the "
            f"file uses in {sec}.arms", file=path, column=column)
    return codes
