"""The ``split`` section shared by the commands that divide the rows into two parts (cate's
halves, select-policy's nuisance and scoring blocks)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from dpcausal.spec.base import StrictModel

ORDER_ASSUMPTION = (
    "the row order of the data file is independent of the data values (not sorted or grouped by "
    "a value such as a date, an id or a covariate): otherwise one changed record moves other "
    "records across the split and the guarantee does not hold"
)
"""What a positional split (``seeded``, ``index``) assumes; stated in the receipt."""


class RowSplit(StrictModel):
    """Which rows go to the first part of the split; the sizes follow from the public n alone.

    ``random`` (default) draws a uniformly random permutation from OS entropy for every run and
    never stores, logs or releases it: the guarantee then holds for the records as a multiset,
    whatever the row order of the file. ``seeded`` (a permutation from the public ``seed``) and
    ``index`` (the first rows) are reproducible but functions of the row position: they assume the
    row order is independent of the data values, and the receipt says so.
    """

    kind: Literal["random", "seeded", "index"] = "random"
    """random (secret, order-free; default) | seeded (public seed; assumes the row order is
    independent of the data) | index (the first rows; same assumption)."""
    seed: int | None = None
    """Public seed of the permutation (``kind: seeded`` only)."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "permute":
            raise ValueError("split.kind: 'permute' is now 'seeded' (a public-seed permutation that "
                             "assumes the row order is independent of the data); the default "
                             "'random' needs no seed and does not depend on the row order")
        return data

    @model_validator(mode="after")
    def _seeded(self) -> RowSplit:
        if self.kind == "seeded" and self.seed is None:
            raise ValueError("split.seed is required with split.kind: seeded (a public seed)")
        if self.kind != "seeded" and self.seed is not None:
            raise ValueError("split.seed is only used with split.kind: seeded")
        return self

    @property
    def positional(self) -> bool:
        """Whether the parts are a function of the row position (``seeded``, ``index``)."""
        return self.kind != "random"

    def receipt(self) -> dict[str, Any]:
        """The receipt's record of the split and of what it assumes."""
        if self.kind == "random":
            return {"kind": "random", "source": "a uniformly random permutation from OS entropy, "
                    "drawn for this run; never stored or released",
                    "row_order": "irrelevant: the guarantee holds for the records as a multiset"}
        out: dict[str, Any] = {"kind": self.kind, "assumption": ORDER_ASSUMPTION}
        if self.seed is not None:
            out["seed"] = self.seed
        return out
