"""The sections every command's spec shares: data, bounds, privacy, ledger, output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from dpcausal.errors import SpecError


class StrictModel(BaseModel):
    """A frozen model that rejects unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_interval(v: tuple[float, float]) -> tuple[float, float]:
    lo, hi = v
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"bounds must be finite numbers, got [{lo}, {hi}]")
    if not lo < hi:
        raise ValueError(f"lower bound must be < upper bound, got [{lo}, {hi}]")
    if not math.isfinite(hi - lo):
        raise ValueError(f"bounds are too wide to compute with (hi - lo overflows), got [{lo}, {hi}]")
    return v


Interval = Annotated[tuple[float, float], AfterValidator(_check_interval)]
"""A public [lo, hi] range with lo < hi, both finite."""

ColumnName = Annotated[str, Field(min_length=1)]


class ColumnsSpec(StrictModel):
    """Column roles in the data file (each command says which it needs)."""

    outcome: ColumnName | None = None
    treatment: ColumnName | None = None
    covariates: list[ColumnName] = Field(default_factory=list)
    propensity: ColumnName | None = None
    unit: ColumnName | None = None
    time: ColumnName | None = None

    @model_validator(mode="after")
    def _distinct(self) -> ColumnsSpec:
        names = [n for n in (self.outcome, self.treatment, self.propensity, self.unit, self.time) if n]
        names += list(self.covariates)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"a column may have only one role; repeated: {', '.join(dup)}")
        return self


class DataSpec(StrictModel):
    """Where the sensitive data is and what its columns mean."""

    path: Path | None = None
    columns: ColumnsSpec = Field(default_factory=ColumnsSpec)


class BoundsSpec(StrictModel):
    """Public bounds. Never derived from data; a method refuses to run without the ones it needs."""

    outcome: Interval | None = None
    covariates: Interval | dict[str, Interval] | None = None

    def covariate(self, name: str) -> tuple[float, float] | None:
        """The bound of covariate ``name``, or None if the spec has none."""
        if self.covariates is None:
            return None
        if isinstance(self.covariates, dict):
            return self.covariates.get(name)
        return self.covariates


ArmLabel = bool | int | float | str
"""A value of a treatment column: a number, a boolean or a string, as it appears in the data."""


class BinaryArms(StrictModel):
    """A command section with a binary treatment: which value is 'treated', and the other arm.

    Both labels come from the spec (public), never from the data: the released rule names them.
    """

    section: ClassVar[str] = "section"
    treated: ArmLabel
    """The treatment column's value that means 'treated' (arm +1)."""
    control: ArmLabel | None = None
    """The other arm's value; defaults to 0 when ``treated`` is 1 (or false when it is true)."""

    @model_validator(mode="after")
    def _arms(self) -> BinaryArms:
        sec = self.section
        if self.control is not None and self.control == self.treated:
            raise ValueError(f"{sec}.control must differ from {sec}.treated")
        if self.control is None and not (isinstance(self.treated, bool) or self.treated == 1):
            raise ValueError(f"{sec}.control is required unless {sec}.treated is 1 or true")
        return self

    def control_label(self) -> ArmLabel:
        """The control arm's label."""
        if self.control is not None:
            return self.control
        if isinstance(self.treated, bool):
            return not self.treated
        return 0


def _finite_positive(v: float) -> float:
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"must be a finite number > 0, got {v}")
    return v


PositiveFinite = Annotated[float, AfterValidator(_finite_positive)]


class PrivacySpec(StrictModel):
    """The privacy parameters of this run."""

    epsilon: PositiveFinite
    delta: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0


class BudgetSpec(StrictModel):
    """A dataset's lifetime cap."""

    epsilon: PositiveFinite
    delta: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0


class LedgerSpec(StrictModel):
    """The persistent ledger that caps a dataset's total spend."""

    path: Path
    dataset: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@+-]+$")]
    budget: BudgetSpec


class OutputSpec(StrictModel):
    """Where released files go."""

    dir: Path = Path("dpcausal-out")


class EngineSpec(StrictModel):
    """Where the data passes run (DESIGN §5). Without an ``engine`` section the table is read into
    memory as before; ``local`` streams it in batches on this machine, ``dask`` runs each pass
    on a Dask cluster. The noise is drawn once, on the client, in every case."""

    kind: Literal["local", "dask"] = "local"
    address: str | None = Field(default=None, min_length=1)
    """Dask scheduler address (``tcp://host:8786``); none starts an in-process LocalCluster."""
    batch_rows: Annotated[int, Field(ge=1_000)] = 262_144
    """Rows per streamed batch (local) or per partition (dask)."""
    cache_mb: Annotated[int, Field(ge=0)] = 2_048
    """Local engine: keep mapped batches in memory up to this many MB; the rest is re-read on
    every pass (0: pure streaming)."""

    @model_validator(mode="after")
    def _address_needs_dask(self) -> EngineSpec:
        if self.address is not None and self.kind != "dask":
            raise ValueError("engine.address is only used with engine.kind: dask")
        return self


class CommonSpec(StrictModel):
    """Fields every command's spec has; a command adds a section named after itself."""

    data: DataSpec = Field(default_factory=DataSpec)
    bounds: BoundsSpec = Field(default_factory=BoundsSpec)
    privacy: PrivacySpec
    ledger: LedgerSpec | None = None
    output: OutputSpec = Field(default_factory=OutputSpec)
    engine: EngineSpec | None = None

    def with_overrides(
        self, *, data: Path | None = None, out: Path | None = None, ledger: Path | None = None,
        engine: str | None = None, engine_address: str | None = None,
    ) -> Any:
        """Return a copy with the CLI's --data / --out / --ledger / --engine(-address) applied."""
        update: dict[str, Any] = {}
        if engine is not None or engine_address is not None:
            base = self.engine or EngineSpec()
            kind = engine if engine is not None else ("dask" if engine_address else base.kind)
            if kind not in ("local", "dask"):
                raise SpecError(f"--engine: unknown engine {kind!r}; use local or dask")
            if engine_address is not None and kind != "dask":
                raise SpecError("--engine-address is only used with --engine dask")
            addr = engine_address if engine_address is not None else (
                base.address if kind == "dask" else None)
            update["engine"] = base.model_copy(update={"kind": kind, "address": addr})
        if data is not None:
            update["data"] = self.data.model_copy(update={"path": data})
        if out is not None:
            update["output"] = self.output.model_copy(update={"dir": out})
        if ledger is not None:
            if self.ledger is None:
                raise SpecError(
                    "--ledger was given but the spec has no 'ledger' section; add "
                    "ledger: {path: ..., dataset: NAME, budget: {epsilon: CAP}} to the spec"
                )
            update["ledger"] = self.ledger.model_copy(update={"path": ledger})
        return self.model_copy(update=update)
