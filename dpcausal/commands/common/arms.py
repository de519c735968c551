"""Binary treatment columns: match the spec's public arm labels, refuse anything else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.errors import DataError
from dpcausal.preprocess.cells import label_matches
from dpcausal.spec.arms import MultiArms
from dpcausal.spec.base import BinaryArms


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
