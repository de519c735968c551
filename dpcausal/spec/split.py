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

ID_ASSUMPTION = (
    "the id column holds a distinct value for each individual (every command's privacy unit is "
    "one row per individual); rows with equal ids are kept in the same part, and a replaced "
    "record whose new id equals another row's id may move one more record across the split"
)
"""What an ``id-hash`` split assumes; stated in the receipt."""


class RowSplit(StrictModel):
    """Which rows go to the first part of the split; the sizes follow from the public n alone.

    ``random`` (default) draws a uniformly random permutation from OS entropy for every run and
    never stores, logs or releases it: the guarantee then holds for the records as a multiset,
    whatever the row order of the file. ``id-hash`` ranks the rows by an HMAC-SHA256 of a declared
    id column under a key drawn for the run from OS entropy (never stored): the split follows each
    row's id, not its position, and with distinct ids it has exactly the law of ``random``.
    ``seeded`` (a permutation from the public ``seed``) and ``index`` (the first rows) are
    reproducible but functions of the row position: they assume the row order is independent of
    the data values, and the receipt says so.
    """

    kind: Literal["random", "id-hash", "seeded", "index"] = "random"
    """random (secret, order-free; default) | id-hash (secret keyed hash of the ``column`` id,
    order-free) | seeded (public seed; assumes the row order is independent of the data) | index
    (the first rows; same assumption)."""
    seed: int | None = None
    """Public seed of the permutation (``kind: seeded`` only)."""
    column: str | None = None
    """The id column whose keyed hash places each row (``kind: id-hash`` only): one distinct value
    per individual, e.g. a patient number. It is read only to be hashed, never released."""

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
        if self.kind == "id-hash" and not self.column:
            raise ValueError("split.column is required with split.kind: id-hash (the id column "
                             "whose keyed hash places each row)")
        if self.kind != "id-hash" and self.column is not None:
            raise ValueError("split.column is only used with split.kind: id-hash")
        return self

    @property
    def positional(self) -> bool:
        """Whether the parts are a function of the row position (``seeded``, ``index``)."""
        return self.kind in ("seeded", "index")

    @property
    def id_column(self) -> str | None:
        """The column an ``id-hash`` split reads, else None."""
        return self.column if self.kind == "id-hash" else None

    def receipt(self) -> dict[str, Any]:
        """The receipt's record of the split and of what it assumes."""
        if self.kind == "random":
            return {"kind": "random", "source": "a uniformly random permutation from ChaCha20 keyed "
                    "by 256 bits of OS entropy, drawn for this run; never stored or released",
                    "row_order": "irrelevant: the guarantee holds for the records as a multiset"}
        if self.kind == "id-hash":
            return {"kind": "id-hash", "column": self.column,
                    "source": "HMAC-SHA256 of each row's id under a 256-bit key from OS entropy, "
                    "drawn for this run and never stored or released; the first part is the rows "
                    "with the smallest tags (equal ids: a secret random order)",
                    "row_order": "irrelevant: the split follows the ids, not the row positions",
                    "assumption": ID_ASSUMPTION}
        out: dict[str, Any] = {"kind": self.kind, "assumption": ORDER_ASSUMPTION}
        if self.seed is not None:
            out["seed"] = self.seed
        return out
