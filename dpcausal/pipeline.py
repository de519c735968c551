"""Run one release end to end; the library API the CLI and the tests share.

Three steps: :func:`prepare` (spec → schema → plan → ledger check; no row read), :func:`estimate`
(read rows, run, noise through the guard) and :func:`charge_and_write` (receipt, charge, publish);
:func:`execute` runs them in order.

Order (DESIGN §1.2): spec → data schema and row count → plan (public inputs only) → ledger check →
``--dry-run`` stops here → the output directory is checked → read rows → estimate and noise → stage
every output (a full disk is found while nothing is spent) → charge the ledger (under its lock,
re-checking the cap) → write the receipt and publish the release whole (one atomic rename). A
failure after the charge says "charged, not published": budget may be wasted, but no output is ever
published without its receipt, an uncharged release is never published, and the previous release
stays in place until the new one is complete.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpcausal import preprocess
from dpcausal.accounting.accountant import RunCost
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger, LedgerState, now_iso
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import build_receipt, sha256_bytes
from dpcausal.errors import AccuracyRefusedError, BudgetExceededError, PrivacyError
from dpcausal.io import tables
from dpcausal.io.release_dir import ReleaseDir
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms.secret import seeded_secrets
from dpcausal.method import MethodDef, Release
from dpcausal.planner import Replan, TargetReport, check_accuracy, plan_target
from dpcausal.preprocess import Preprocessor
from dpcausal.publishing import Charge, charge_and_publish, render_release
from dpcausal.rng import make_rng
from dpcausal.side_inputs import SideInputs, side_inputs
from dpcausal.side_inputs import load_side_inputs as load_side_inputs  # its former home
from dpcausal.spec.base import CommonSpec


@dataclass
class RunResult:
    """What a run did: its plan, the ledger state, and (unless a dry run) the receipt and files."""

    plan: PrivacyPlan
    n_rows: int
    ledger_state: LedgerState | None
    dry_run: bool
    receipt: dict[str, Any] | None = None
    output_paths: list[Path] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    refusal: PrivacyError | None = None
    """A dry run whose plan the ledger (or the accuracy guard) refuses: the plan is still shown,
    then this error (exit 3)."""
    target: TargetReport | None = None
    """``--dry-run --target-halfwidth``: the smallest ε (and n) meeting the target."""
    release: Release | None = None
    """What the method released (unless a dry run)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """The released files' bytes as hashed in the receipt (``receipt.json`` apart)."""

    def plan_dict(self) -> dict[str, Any]:
        """The plan as printed by ``--dry-run --json``."""
        return plan_document(self.plan, self.n_rows, self.ledger_state, self.target,
                             dry_run=self.dry_run)


def plan_document(plan: PrivacyPlan, n_rows: int, ledger_state: LedgerState | None,
                  target: TargetReport | None, *, dry_run: bool) -> dict[str, Any]:
    """A plan as ``--dry-run --json`` prints it (and the API's ``Plan.to_dict``)."""
    cost = plan.cost
    return {
        "command": plan.command,
        "dry_run": dry_run,
        "n_rows": n_rows,
        "epsilon": cost.epsilon,
        "delta": cost.delta,
        "guarantee": plan.guarantee if plan.dp_guarantee else "none",
        "dp_guarantee": plan.dp_guarantee,
        "neighbouring": plan.neighbouring,
        "events": [e.to_dict() for e in plan.events],
        "assumptions": plan.assumptions,
        "details": plan.details,
        "accuracy": [a.to_dict() for a in plan.accuracy],
        "ledger": ledger_state.to_dict() if ledger_state else None,
        **({"target": target.to_dict()} if target is not None else {}),
    }


def _with_preprocessing(release: Release, prep: Preprocessor) -> Release:
    """Every JSON document of the release names the preprocessing its model columns come from,
    so a released rule can be applied to raw rows (``--apply``)."""
    if not prep.active:
        return release
    docs = {name: ({**doc, "preprocessing": prep.describe()} if isinstance(doc, dict) else doc)
            for name, doc in release.documents.items()}
    return replace(release, documents=docs)


@dataclass
class Prepared:
    """A run after :func:`prepare`: its plan checked against the ledger, no data row read."""

    method: MethodDef
    spec: CommonSpec
    spec_sha256: str
    started: str
    """The receipt's created_at: the start (the end would time the data)."""
    info: tables.TableInfo
    side: SideInputs
    rng: np.random.Generator
    plan: PrivacyPlan
    ledger: Ledger | None
    cap: Budget | None
    state: LedgerState | None
    refusal: PrivacyError | None
    """The ledger's (or the accuracy guard's) refusal of the plan (raised by :func:`execute`
    unless it is a dry run)."""
    engine_run: Callable[..., Release] | None
    """The command's engine path when the spec names an engine; None: in memory."""
    replan: Replan
    """The plan at another ε or n, from public inputs only (the guard and the ε planner)."""
    prep: Preprocessor
    """The declared row-local preprocessing (``spec`` is already the model spec it makes)."""
    columns: list[str]
    """The data file's raw columns to read."""


@dataclass
class Estimated:
    """A run after :func:`estimate`: the released files, not yet charged or written."""

    plan: PrivacyPlan
    release: Release
    files: dict[str, bytes]
    noise_source: str
    engine_record: dict[str, Any] | None


def prepare(method: MethodDef, spec: CommonSpec, spec_sha256: str, *,
            seed: int | None = None) -> Prepared:
    """Spec → the data's schema and row count → plan (public inputs only) → ledger check → the
    accuracy guard (``accuracy.max_halfwidth``, DESIGN principle 9).

    Reads no data row: only the table's schema and row count, and the public side files.
    """
    started = now_iso()
    info = tables.inspect_table(spec.data.path)
    prep = preprocess.for_spec(spec)  # from the spec alone: model columns and their bounds
    spec = prep.model_spec(spec)  # what the method sees: numeric, bounded covariates
    columns = prep.raw_columns(method.data_columns(spec))
    tables.check_columns(info, columns)
    engine_run = None
    if spec.engine is not None:  # DESIGN §5: the data passes run on an engine
        from dpcausal.commands import by_name
        from dpcausal.engine import check_source

        engine_run = by_name(method.command).engine_run()
        check_source(spec.engine, info)
    side = side_inputs(method, spec, prep)
    rng = make_rng(seed)
    plan = method.plan(spec, info.n_rows, side, rng=rng)
    if prep.active:  # the dry run and the receipt list every rule and model column
        plan = replace(plan, assumptions={**plan.assumptions, "preprocessing": prep.describe()})
    ledger = Ledger(spec.ledger.location) if spec.ledger else None
    state = cap = None
    refusal: PrivacyError | None = None
    if ledger is not None and spec.ledger is not None:
        cap = Budget(spec.ledger.budget.epsilon, spec.ledger.budget.delta)
        state = ledger.state(spec.ledger.dataset, RunCost.from_plan(plan), cap)
        try:
            Ledger.check(state)
        except BudgetExceededError as exc:
            refusal = exc

    def replan(epsilon: float | None, n_rows: int | None) -> PrivacyPlan:
        """The plan at another ε or n: public inputs only, a fresh public generator."""
        at = spec.with_overrides(epsilon=epsilon) if epsilon is not None else spec
        return method.plan(at, n_rows or info.n_rows, side, rng=make_rng(seed))

    if refusal is None:
        try:  # the utility guard: on the plan alone, before any row is read
            check_accuracy(plan, replan, max_halfwidth=spec.accuracy.max_halfwidth,
                           quantity=spec.accuracy.quantity, epsilon=spec.privacy.epsilon)
        except AccuracyRefusedError as exc:
            refusal = exc
    return Prepared(method, spec, spec_sha256, started, info, side, rng, plan, ledger, cap, state,
                    refusal, engine_run, replan, prep, columns)


def estimate(run: Prepared, out: ReleaseDir | None, *,
             test_noise_seed: int | None = None) -> Estimated:
    """Check ``out`` can take the release (None: kept in memory), read the rows (or open the
    engine), run the method, draw every noise through the run's one guard, and render the
    outputs; nothing is charged or written.

    Numeric RuntimeWarnings (overflow, invalid values) are silenced from here on: after the rows
    are read, whether one is printed would be a data-dependent output on stderr (DESIGN §7); the
    methods' results never rely on them (every bound is public and checked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _estimate(run, out, test_noise_seed)


def _estimate(run: Prepared, out: ReleaseDir | None, test_noise_seed: int | None) -> Estimated:
    method, spec, info, plan = run.method, run.spec, run.info, run.plan
    if out is not None:
        out.preflight()
    engine_record = None
    if run.engine_run is None:
        frame = tables.read_table(spec.data.path, run.columns)
        if len(frame) != info.n_rows:  # n is public and sets every sensitivity
            raise tables.changed_error(info.path)
        run.prep.check(frame, info.path)  # every bad cell of every column, in one error
        frame = run.prep.transform(frame)
    if test_noise_seed is not None:
        plan = replace(plan, dp_guarantee=False)  # seeded noise can be subtracted: no guarantee
    noise = NoiseGuard(plan, test_seed=test_noise_seed)  # the run's only way to draw noise
    if run.engine_run is None:
        with seeded_secrets(test_noise_seed):  # the split's secret: OS entropy unless seeded
            release = method.run(spec, frame, plan, run.side, rng=run.rng, noise=noise)
        del frame
    else:
        from dpcausal.engine import open_engine

        assert spec.engine is not None
        with open_engine(spec.engine, info, run.columns, run.prep) as engine, \
                seeded_secrets(test_noise_seed):
            release = run.engine_run(spec, engine, plan, run.side, rng=run.rng, noise=noise)
            # public facts only: the number of passes follows the solvers' data-dependent
            # iteration counts, so it is never published (as in memory)
            engine_record = {"kind": spec.engine.kind, "description": engine.description}
    noise.check_all_drawn()  # every planned stage drawn once, before anything is written or charged
    release = _with_preprocessing(release, run.prep)
    files = render_release(release, parquet=info.format == "parquet")
    return Estimated(plan, release, files, noise.source, engine_record)


def charge_and_write(run: Prepared, est: Estimated, out: ReleaseDir | None, *,
                     seeded_noise: bool) -> RunResult:
    """Build the receipt, charge the ledger and publish the release whole
    (:func:`charge_and_publish`; ``out=None``: charge only, the release stays in memory); the
    result as charged."""
    spec = run.spec
    receipt = build_receipt(
        est.plan,
        spec_sha256=run.spec_sha256,
        outputs={name: sha256_bytes(data) for name, data in est.files.items()},
        seeded_noise=seeded_noise,
        noise_source=est.noise_source,
        dataset=spec.ledger.dataset if spec.ledger else None,
        engine=est.engine_record,
        created_at=run.started,
    )
    receipt, paths = charge_and_publish(out, est.files, receipt, Charge(
        run.ledger, spec.ledger.dataset if spec.ledger else None, run.cap))
    state = run.state
    if state is not None:  # as charged: the spend may have grown since the plan check
        charged = receipt["ledger"]
        state = replace(state, spent=Budget(**charged["spent_before"]),
                        after=Budget(**charged["spent_after"]), cap=Budget(**charged["cap"]),
                        ledger_id=charged["ledger_id"])
    return RunResult(plan=est.plan, n_rows=run.info.n_rows, ledger_state=state, dry_run=False,
                     receipt=receipt, output_paths=paths, summary=est.release.summary,
                     release=est.release, files=est.files)


def execute(
    method: MethodDef,
    spec: CommonSpec,
    spec_sha256: str,
    *,
    seed: int | None = None,
    dry_run: bool = False,
    test_noise_seed: int | None = None,
    target_halfwidth: float | None = None,
    write: bool = True,
) -> RunResult:
    """Plan, check, and (unless ``dry_run``) run and release: :func:`prepare`, then
    :func:`estimate`, then :func:`charge_and_write`.

    Parameters
    ----------
    method
        The command's method.
    spec
        The validated spec, with CLI overrides applied.
    spec_sha256
        Hash of the spec file (for the receipt).
    seed
        Seed for public randomness only (splits, public simulations).
    dry_run
        Stop after the plan and the ledger check; read no row.
    test_noise_seed
        Make the privacy noise reproducible. For tests only: the receipt then says
        ``dp_guarantee: false``.
    target_halfwidth
        With ``dry_run``: also search the smallest ε (and n) whose predicted half-width of the
        headline quantity (or ``accuracy.quantity``) is at most this.
    write
        Publish the release into ``spec.output.dir`` (False: charge it and keep it in memory,
        ``RunResult.release`` and ``files``; the Python API's ``release(..., out=None)``).
    """
    run = prepare(method, spec, spec_sha256, seed=seed)
    if dry_run:  # a dry run shows the plan it refuses (the CLI exits 3 after)
        target = None if target_halfwidth is None else plan_target(
            run.plan, run.replan, target=target_halfwidth, quantity=spec.accuracy.quantity,
            epsilon=spec.privacy.epsilon, n_rows=run.info.n_rows)
        return RunResult(plan=run.plan, n_rows=run.info.n_rows, ledger_state=run.state,
                         dry_run=True, refusal=run.refusal, target=target)
    if run.refusal is not None:
        raise run.refusal
    run.side.read_all()  # every public side file before the first data row
    out = ReleaseDir(Path(spec.output.dir)) if write else None
    est = estimate(run, out, test_noise_seed=test_noise_seed)
    return charge_and_write(run, est, out, seeded_noise=test_noise_seed is not None)
