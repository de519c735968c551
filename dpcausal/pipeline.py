"""Run one release end to end; the library API the CLI and the tests share.

Order (DESIGN §1.2): spec → data schema and row count → plan (public inputs only) → ledger check →
``--dry-run`` stops here → the output directory is checked → read rows → estimate and noise → stage
every output (a full disk is found while nothing is spent) → charge the ledger (under its lock,
re-checking the cap) → write the receipt and publish the release whole (one atomic rename). A
failure after the charge says "charged, not published": budget may be wasted, but no output is ever
published without its receipt, an uncharged release is never published, and the previous release
stays in place until the new one is complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dpcausal.accounting.accountant import RunCost
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger, LedgerState, now_iso
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import build_receipt, finalize, sha256_bytes
from dpcausal.errors import BudgetExceededError, OutputError
from dpcausal.io import tables
from dpcausal.io.documents import read_document
from dpcausal.io.release_dir import RECEIPT, ReleaseDir
from dpcausal.io.writers import csv_bytes, json_bytes, parquet_bytes
from dpcausal.mechanisms import NoiseGuard
from dpcausal.methods.base import MethodDef, Release
from dpcausal.rng import make_rng
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
    refusal: BudgetExceededError | None = None
    """A dry run whose plan the ledger refuses: the plan is still shown, then this error (exit 3)."""

    def plan_dict(self) -> dict[str, Any]:
        """The plan as printed by ``--dry-run --json``."""
        cost = self.plan.cost
        return {
            "command": self.plan.command,
            "dry_run": self.dry_run,
            "n_rows": self.n_rows,
            "epsilon": cost.epsilon,
            "delta": cost.delta,
            "guarantee": self.plan.guarantee if self.plan.dp_guarantee else "none",
            "dp_guarantee": self.plan.dp_guarantee,
            "neighbouring": self.plan.neighbouring,
            "events": [e.to_dict() for e in self.plan.events],
            "assumptions": self.plan.assumptions,
            "details": self.plan.details,
            "ledger": self.ledger_state.to_dict() if self.ledger_state else None,
        }


def render_release(release: Release, *, parquet: bool) -> dict[str, bytes]:
    """File name → bytes, for every output of ``release``."""
    files: dict[str, bytes] = {}
    for name, doc in release.documents.items():
        files[name] = json_bytes(doc)
    for stem, frame in release.tables.items():
        files[f"{stem}.csv"] = csv_bytes(frame)
        if parquet:
            files[f"{stem}.parquet"] = parquet_bytes(frame)
    files.update(release.figures)
    return files


@dataclass(frozen=True)
class Charge:
    """What the charge needs: the ledger (None: receipted, not capped), label, spec cap."""

    ledger: Ledger | None
    dataset: str | None
    spec_cap: Budget | None


def charge_and_publish(out: ReleaseDir, files: dict[str, bytes], receipt: dict[str, Any],
                       charge: Charge) -> tuple[dict[str, Any], list[Path]]:
    """Stage ``files``, charge the ledger, then publish the release with its receipt, whole.

    Returns the receipt as charged and the published paths (the receipt last). A failure while
    staging or charging spends nothing and publishes nothing; a failure after the charge raises
    OutputError saying "charged, not published" and leaves the previous release in place.
    """
    try:
        staged = out.stage(files)
    except OutputError as exc:
        raise OutputError(f"{exc}; nothing was spent") from exc
    try:
        if charge.ledger is not None:
            assert charge.dataset is not None
            assert charge.spec_cap is not None
            final = charge.ledger.charge(receipt, dataset=charge.dataset,
                                         spec_cap=charge.spec_cap)
        else:
            final = finalize({**receipt, "ledger": None}, None)
    except BaseException:
        staged.discard()
        raise
    version = (f"{final['seq']:06d}-{final['hash'][:12]}" if final.get("seq")
               else final["hash"][:12])
    try:
        staged.add(RECEIPT, json_bytes(final))
        paths = staged.publish(version)
    except BaseException as exc:
        staged.discard()
        if not isinstance(exc, OSError | OutputError):
            raise
        what = (f"charged, not published: the budget of this run is spent (ledger line "
                f"{final['seq']}, hash {final['hash'][:12]})" if final.get("seq")
                else "computed, not published")
        raise OutputError(f"{exc}. The release was {what}; nothing was written to {out.out}, and "
                          "the previous release there (if any) is intact") from exc
    return final, paths


def load_side_inputs(method: MethodDef, spec: CommonSpec) -> dict[str, Any]:
    """Read the public side files a method declares (tables, or YAML/JSON documents)."""
    return {
        name: read_document(s.path, s.what) if s.kind == "document" else
        tables.read_table(s.path, s.columns or list(tables.inspect_table(s.path, s.what).columns),
                          s.what)
        for name, s in method.side_inputs(spec).items()
    }


def execute(
    method: MethodDef,
    spec: CommonSpec,
    spec_sha256: str,
    *,
    seed: int | None = None,
    dry_run: bool = False,
    test_noise_seed: int | None = None,
) -> RunResult:
    """Plan, check, and (unless ``dry_run``) run and release.

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
    """
    started = now_iso()  # the receipt's created_at: the start (the end would time the data)
    info = tables.inspect_table(spec.data.path)
    tables.check_columns(info, method.data_columns(spec))
    engine_run = None
    if spec.engine is not None:  # DESIGN §5: the data passes run on an engine
        from dpcausal.engine import check_source, runner_for

        engine_run = runner_for(method.command)
        check_source(spec.engine, info)
    side = load_side_inputs(method, spec)
    rng = make_rng(seed)
    plan = method.plan(spec, info.n_rows, side, rng=rng)
    ledger = Ledger(spec.ledger.location) if spec.ledger else None
    state = None
    cap = None
    if ledger is not None and spec.ledger is not None:
        cap = Budget(spec.ledger.budget.epsilon, spec.ledger.budget.delta)
        state = ledger.state(spec.ledger.dataset, RunCost.from_plan(plan), cap)
    result = RunResult(plan=plan, n_rows=info.n_rows, ledger_state=state, dry_run=dry_run)
    if state is not None:
        try:
            Ledger.check(state)
        except BudgetExceededError as exc:
            if not dry_run:
                raise
            result.refusal = exc  # a dry run shows the plan it refuses (the CLI exits 3 after)
    if dry_run:
        return result

    out = ReleaseDir(Path(spec.output.dir))
    out.preflight()
    engine_record = None
    if engine_run is None:
        frame = tables.read_table(spec.data.path, method.data_columns(spec))
        if len(frame) != info.n_rows:  # n is public and sets every sensitivity
            raise tables.changed_error(info.path)
    if test_noise_seed is not None:
        plan = replace(plan, dp_guarantee=False)  # seeded noise can be subtracted: no guarantee
        result.plan = plan
    noise = NoiseGuard(plan, test_seed=test_noise_seed)  # the run's only way to draw noise
    if engine_run is None:
        release = method.run(spec, frame, plan, side, rng=rng, noise=noise)
        del frame
    else:
        from dpcausal.engine import open_engine

        assert spec.engine is not None
        with open_engine(spec.engine, info, method.data_columns(spec)) as engine:
            release = engine_run(spec, engine, plan, side, rng=rng, noise=noise)
            # public facts only: the number of passes follows the solvers' data-dependent
            # iteration counts, so it is never published (as in memory)
            engine_record = {"kind": spec.engine.kind, "description": engine.description}
    noise.check_all_drawn()  # every planned stage drawn once, before anything is written or charged
    files = render_release(release, parquet=info.format == "parquet")
    receipt = build_receipt(
        plan,
        spec_sha256=spec_sha256,
        outputs={name: sha256_bytes(data) for name, data in files.items()},
        seeded_noise=test_noise_seed is not None,
        noise_source=noise.source,
        dataset=spec.ledger.dataset if spec.ledger else None,
        engine=engine_record,
        created_at=started,
    )
    receipt, result.output_paths = charge_and_publish(out, files, receipt, Charge(
        ledger, spec.ledger.dataset if spec.ledger else None, cap))
    if state is not None:  # as charged: the spend may have grown since the plan check
        charged = receipt["ledger"]
        result.ledger_state = replace(state, spent=Budget(**charged["spent_before"]),
                                      after=Budget(**charged["spent_after"]),
                                      cap=Budget(**charged["cap"]), ledger_id=charged["ledger_id"])
    result.receipt = receipt
    result.summary = release.summary
    return result
