"""The sections every command's spec shares: data, bounds, privacy, ledger, output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import AfterValidator, Field, model_validator

from dpcausal.accounting.ledger_url import is_database_url, url_problem
from dpcausal.errors import SpecError
from dpcausal.spec.arms import refuse_arms
from dpcausal.spec.model import ArmLabel, StrictModel
from dpcausal.spec.preprocess import PreprocessSpec


def check_interval(v: tuple[float, float]) -> tuple[float, float]:
    lo, hi = v
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"bounds must be finite numbers, got [{lo}, {hi}]")
    if not lo < hi:
        raise ValueError(f"lower bound must be < upper bound, got [{lo}, {hi}]")
    if not math.isfinite(hi - lo):
        raise ValueError(f"bounds are too wide to compute with (hi - lo overflows), got [{lo}, {hi}]")
    return v


Interval = Annotated[tuple[float, float], AfterValidator(check_interval)]
"""A public [lo, hi] range with lo < hi, both finite."""

ColumnName = Annotated[str, Field(min_length=1)]


class ColumnsSpec(StrictModel):
    """Column roles in the data file (each command says which it needs)."""

    outcome: ColumnName | None = None
    """Column of the outcome Y (numeric). It is clipped to bounds.outcome before anything is
    computed, so a value outside the bounds is released as if it were at the bound."""
    treatment: ColumnName | None = None
    """Column of the treatment arm (a number, a boolean or a text label); the command's section
    says which value means treated. Rows with any other value are refused, never dropped."""
    covariates: list[ColumnName] = Field(default_factory=list)
    """Columns of the covariates, in order. The list is public: choose it without looking at the
    sensitive data (selecting covariates on it is itself a privacy leak). Each is clipped to its
    bound in bounds.covariates; a categorical one, or one with missing cells, needs a rule in
    the preprocess section."""
    propensity: ColumnName | None = None
    """Not read by any command: owl names its design-probability column in
    owl.propensity.column. Setting it only reserves the name (it may not repeat another role)."""
    unit: ColumnName | None = None
    """synth-control, long layout: the column naming each row's unit (the target or a donor)."""
    time: ColumnName | None = None
    """synth-control: the column of periods (numbers, ISO dates, or text that sorts in time
    order); periods before synth_control.treatment_time form the pre-period."""

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
    """The sensitive data file: .csv, .csv.gz (decompressed as it is read), .parquet, or a
    directory of .parquet files. Relative paths are resolved from the current directory;
    --data overrides it. A dry run reads only its header and row count."""
    columns: ColumnsSpec = Field(default_factory=ColumnsSpec)
    """Which column plays which role; each name may have only one role, and must be a name the
    file has exactly once."""


class BoundsSpec(StrictModel):
    """Public bounds. Never derived from data; a method refuses to run without the ones it needs."""

    outcome: Interval | None = None
    """[lo, hi], in the outcome's units: the public range every outcome is clipped to. Every
    sensitivity that involves Y scales with hi − lo, so a wider range means proportionally more
    noise; a narrower one clips real values (bias). Never derive it from the data."""
    covariates: Interval | dict[str, Interval] | None = None
    """One [lo, hi] for every covariate, or {name: [lo, hi]} per covariate, in each covariate's
    units: values are clipped to it, then scaled by it (how, the command's ``scaling`` says).
    Required by every command that reads covariates; never derive it from the data. A
    categorical covariate (preprocess.covariates.NAME.levels) has none: its level columns are in
    [0, 1]."""

    def covariate(self, name: str) -> tuple[float, float] | None:
        """The bound of covariate ``name``, or None if the spec has none."""
        if self.covariates is None:
            return None
        if isinstance(self.covariates, dict):
            return self.covariates.get(name)
        return self.covariates


class BinaryArms(StrictModel):
    """A command section with a binary treatment: which value is 'treated', and the other arm.

    Both labels come from the spec (public), never from the data: the released rule names them.
    """

    section: ClassVar[str] = "section"
    command: ClassVar[str] = "this command"
    multi_arm_why: ClassVar[str] = "its method is defined for two arms"
    """Why the command refuses K ≥ 3 ``arms`` (its spec's words), for the refusal message."""
    treated: ArmLabel
    """The treatment column's value that means 'treated' (arm +1), written as it appears in the
    data (a number, true/false or a text label); public."""
    control: ArmLabel | None = None
    """The other arm's value; defaults to 0 when treated is 1 (false when treated is true), and
    is required otherwise. A row whose treatment is neither label is refused, never dropped."""

    @model_validator(mode="before")
    @classmethod
    def _binary_only(cls, data: Any) -> Any:
        refuse_arms(cls.section, cls.command, cls.multi_arm_why, data)
        return data

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

    def labels(self) -> tuple[ArmLabel, ...]:
        """Both declared arms: (treated, control)."""
        return self.treated, self.control_label()


def _finite_positive(v: float) -> float:
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"must be a finite number > 0, got {v}")
    return v


PositiveFinite = Annotated[float, AfterValidator(_finite_positive)]


class PrivacySpec(StrictModel):
    """The privacy parameters of this run."""

    epsilon: PositiveFinite
    """ε of this run, in total over all of its mechanisms (> 0). Smaller ε is more private and
    noisier: the noise scales grow like 1/ε. It is charged to the ledger in full. An ε too small
    for float64 arithmetic (a noise scale beyond 1e50) is refused."""
    delta: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """δ of this run, in [0, 1); default 0 (pure ε-DP). Only commands with Gaussian noise use
    δ > 0 (cate requires it; two-stage with noise: gaussian); the others refuse it. Keep it well
    below 1/(number of rows): δ is the probability that the ε guarantee fails."""

    def with_epsilon(self, epsilon: float) -> PrivacySpec:
        """A copy with ε replaced (``--epsilon``), validated like the spec's own value."""
        if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
            raise SpecError(f"--epsilon: must be a finite number > 0, got {epsilon}",
                            field="--epsilon")
        return self.model_copy(update={"epsilon": float(epsilon)})


class AccuracySpec(StrictModel):
    """How sure every release says it is, and how sure it must be to run (DESIGN principle 9)."""

    alpha: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.05
    """α of the (1 − α) intervals written beside every released number and predicted by the dry
    run (default 0.05: 95% intervals). Intervals are post-processing of public parameters: α
    changes no noise and costs no ε."""
    max_halfwidth: PositiveFinite | None = None
    """Refuse the run (exit 3) before reading any row when the predicted noise half-width of the
    headline quantity (or of accuracy.quantity) exceeds this, in that quantity's units (the dry
    run prints them); the message names the ε that would meet it. Default: no limit."""
    quantity: Annotated[str, Field(min_length=1)] | None = None
    """Which predicted quantity max_halfwidth and --target-halfwidth refer to, by the name the
    dry run prints (e.g. margin, theta[0]); default: the command's headline quantity."""


class BudgetSpec(StrictModel):
    """A dataset's lifetime cap."""

    epsilon: PositiveFinite
    """The most ε the dataset may spend over every release recorded in the ledger (ε adds up
    across releases: basic composition). A run that would pass it is refused (exit 3) before
    any row is read."""
    delta: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """The most δ the dataset may spend over every release in the ledger; default 0, which
    refuses every run with δ > 0."""


class LedgerSpec(StrictModel):
    """The persistent ledger that caps a dataset's total spend: a JSONL file (``path``) or a
    PostgreSQL database shared by many hosts (``url``), exactly one of the two."""

    path: Path | None = None
    """The ledger as an append-only JSONL file, one hash-chained line per release, locked while a
    run checks and charges it (<path>.lock); created on the first release, in an existing
    directory. --ledger overrides it. Every run on one dataset must use the same ledger, or its
    cap is not enforced. Give path or url, not both."""
    url: str | None = None
    """The ledger in a PostgreSQL database shared by many hosts and CI jobs:
    postgresql://host[:port]/dbname (created by 'dpcausal ledger init --url'). Never a password:
    libpq's PGPASSWORD, password file or service file supply it; the jobs' ledger key comes
    from DPCAUSAL_LEDGER_KEY_FILE. --ledger overrides it."""
    dataset: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@+-]+$")]
    """The budget label that releases are charged to: a name you choose for the protected rows
    (letters, digits and ._:/@+-), never a hash of the data. Runs on the same rows must use the
    same label, or their spending is counted apart."""
    budget: BudgetSpec
    """The dataset's lifetime cap {epsilon, delta}."""

    @model_validator(mode="after")
    def _one_location(self) -> LedgerSpec:
        # a model-level check: the error does not echo the URL (it may hold a password)
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of ledger.path (a JSONL file) and ledger.url "
                             "(postgresql://host/dbname)")
        problem = url_problem(self.url) if self.url is not None else None
        if problem:
            raise ValueError(f"ledger.url: {problem}")
        return self

    @property
    def location(self) -> str | Path:
        """The ledger file or database URL."""
        return self.url if self.url is not None else cast(Path, self.path)

    def at(self, location: str | Path) -> LedgerSpec:
        """This ledger section pointed at ``location`` (``--ledger``: a file or a URL)."""
        if is_database_url(location):
            problem = url_problem(str(location))
            if problem:
                raise SpecError(f"--ledger: {problem}")
            return self.model_copy(update={"url": str(location), "path": None})
        return self.model_copy(update={"path": Path(location), "url": None})


class OutputSpec(StrictModel):
    """Where released files go."""

    dir: Path = Path("dpcausal-out")
    """Directory of the released files and receipt.json; default ./dpcausal-out, created if
    missing; --out overrides it. A release replaces the previous release's files there."""


class EngineSpec(StrictModel):
    """Where the data passes run (DESIGN §5). Without an ``engine`` section the table is read into
    memory as before; ``local`` streams it in batches on this machine, ``dask`` runs each pass
    on a Dask cluster. The noise is drawn once, on the client, in every case."""

    kind: Literal["local", "dask"] = "local"
    """local: stream the file in batches on this machine (bounded memory); dask: run each data
    pass on a Dask cluster (Parquet only). Either way the result and the privacy guarantee are
    those of the in-memory run; only memory use and speed change."""
    address: str | None = Field(default=None, min_length=1)
    """Dask scheduler address (``tcp://host:8786``); none starts an in-process LocalCluster."""
    batch_rows: Annotated[int, Field(ge=1_000)] = 262_144
    """Rows per streamed batch (local) or per partition (dask), at least 1,000; default 262,144.
    Changes memory use and speed only, never the result."""
    cache_mb: Annotated[int, Field(ge=0)] = 2_048
    """Local engine: keep mapped batches in memory up to this many MB (default 2,048); the rest
    is re-read from the file on every pass (0: pure streaming). Changes speed only."""

    @model_validator(mode="after")
    def _address_needs_dask(self) -> EngineSpec:
        if self.address is not None and self.kind != "dask":
            raise ValueError("engine.address is only used with engine.kind: dask")
        return self


class CommonSpec(StrictModel):
    """Fields every command's spec has; a command adds a section named after itself."""

    data: DataSpec = Field(default_factory=DataSpec)
    """The sensitive file and the role of its columns."""
    bounds: BoundsSpec = Field(default_factory=BoundsSpec)
    """Public bounds of the outcome and the covariates; a command refuses to run (exit 3) without
    the ones its sensitivity needs."""
    privacy: PrivacySpec
    """The (ε, δ) this run spends in total over its mechanisms, all of it charged to the
    ledger."""
    ledger: LedgerSpec | None = None
    """The persistent ledger that caps the dataset's total spend. Without it a run is still
    receipted, but nothing stops repeated runs from adding up."""
    output: OutputSpec = Field(default_factory=OutputSpec)
    """The directory the released tables, figures and receipt.json are written to (atomically,
    after the ledger is charged)."""
    engine: EngineSpec | None = None
    """Where the data passes run; without it (and without --engine) the columns are read into
    memory."""
    accuracy: AccuracySpec = Field(default_factory=AccuracySpec)
    """The level of the noise intervals written beside released numbers, and an optional limit on
    the predicted half-width that refuses a run before it reads any row."""
    preprocess: PreprocessSpec | None = None
    """Declared, row-local rules turning the raw covariates into the model's numeric, bounded
    covariates: categorical levels (one-hot), missing values (a fill value and an indicator),
    log1p, products. Without it every covariate is numeric and a missing value refuses the run."""

    def with_overrides(
        self, *, data: Path | None = None, out: Path | None = None,
        ledger: str | Path | None = None,
        engine: str | None = None, engine_address: str | None = None,
        epsilon: float | None = None,
    ) -> Any:
        """Return a copy with the CLI's --data / --out / --ledger / --engine(-address) /
        --epsilon applied."""
        update: dict[str, Any] = {}
        if epsilon is not None:
            update["privacy"] = self.privacy.with_epsilon(epsilon)
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
                    "ledger: {path: ... (or url: postgresql://...), dataset: NAME, budget: "
                    "{epsilon: CAP}} to the spec"
                )
            update["ledger"] = self.ledger.at(ledger)
        return self.model_copy(update=update)
