"""Run one release end to end; the library API the CLI and the tests share.

Order (DESIGN §1.2): spec → data schema and row count → plan (public inputs only) → ledger check →
``--dry-run`` stops here → read rows → estimate and noise → charge the ledger (under its lock,
re-checking the cap) → write outputs and the receipt atomically. Charging before writing means a
crash can waste budget but can never publish an uncharged release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger, LedgerState
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import build_receipt, finalize, sha256_bytes
from dpcausal.errors import OutputError
from dpcausal.io import tables
from dpcausal.io.documents import read_document
from dpcausal.io.writers import (
    atomic_write,
    check_writable_dir,
    csv_bytes,
    json_bytes,
    parquet_bytes,
)
from dpcausal.mechanisms import noise_generator
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


def write_release_files(out_dir: Path, files: dict[str, bytes], receipt: bytes) -> list[Path]:
    """Replace the output set in ``out_dir``: old receipt first, new files, new receipt last.

    Each file is written atomically. Removing the old receipt first means a run killed midway
    leaves no receipt that claims files of either run; files the previous receipt listed that
    this release does not write are removed, so stale outputs never sit beside a new receipt.
    """
    old_receipt = out_dir / "receipt.json"
    stale: list[Path] = []
    if old_receipt.is_file():
        try:
            previous = json.loads(old_receipt.read_text())
            stale = [out_dir / o["path"] for o in previous.get("outputs", [])
                     if isinstance(o, dict) and o.get("path") not in files
                     and "/" not in str(o.get("path")) and str(o.get("path")) != "receipt.json"]
        except (OSError, ValueError, AttributeError):
            stale = []
    try:
        old_receipt.unlink(missing_ok=True)
        for path in stale:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot replace the previous outputs: {exc.strerror}") from exc
    written = []
    for name, data in files.items():
        atomic_write(out_dir / name, data)
        written.append(out_dir / name)
    atomic_write(old_receipt, receipt)
    written.append(old_receipt)
    return written


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
    ledger = Ledger(spec.ledger.path) if spec.ledger else None
    state = None
    cap = None
    if ledger is not None and spec.ledger is not None:
        cap = Budget(spec.ledger.budget.epsilon, spec.ledger.budget.delta)
        state = ledger.state(spec.ledger.dataset, plan.cost, cap)
        Ledger.check(state)
    result = RunResult(plan=plan, n_rows=info.n_rows, ledger_state=state, dry_run=dry_run)
    if dry_run:
        return result

    out_dir = Path(spec.output.dir)
    check_writable_dir(out_dir)
    engine_record = None
    if engine_run is None:
        frame = tables.read_table(spec.data.path, method.data_columns(spec))
        if len(frame) != info.n_rows:  # n is public and sets every sensitivity
            raise tables.changed_error(info.path)
    if test_noise_seed is not None:
        plan = replace(plan, dp_guarantee=False)  # seeded noise can be subtracted: no guarantee
        result.plan = plan
    noise_rng = noise_generator(test_noise_seed)
    if engine_run is None:
        release = method.run(spec, frame, plan, side, rng=rng, noise_rng=noise_rng)
        del frame
    else:
        from dpcausal.engine import open_engine

        assert spec.engine is not None
        with open_engine(spec.engine, info, method.data_columns(spec)) as engine:
            release = engine_run(spec, engine, plan, side, rng=rng, noise_rng=noise_rng)
            # public facts only: the number of passes follows the solvers' data-dependent
            # iteration counts, so it is never published (as in memory)
            engine_record = {"kind": spec.engine.kind, "description": engine.description}
    files = render_release(release, parquet=info.format == "parquet")
    for name in [*files, "receipt.json"]:
        if (out_dir / name).is_dir():
            raise OutputError(f"{out_dir / name}: an output would replace a directory; remove it "
                              "or choose another --out (nothing was spent)")
    receipt = build_receipt(
        plan,
        spec_sha256=spec_sha256,
        outputs={name: sha256_bytes(data) for name, data in files.items()},
        seeded_noise=test_noise_seed is not None,
        dataset=spec.ledger.dataset if spec.ledger else None,
        engine=engine_record,
    )
    if ledger is not None and spec.ledger is not None and cap is not None:
        receipt = ledger.append(receipt, dataset=spec.ledger.dataset, cap=cap, requested=plan.cost)
        result.ledger_state = LedgerState(
            spec.ledger.dataset,
            Budget(**receipt["ledger"]["spent_before"]),
            plan.cost,
            cap,
        )
    else:
        receipt = finalize({**receipt, "ledger": None}, None)
    try:
        result.output_paths = write_release_files(out_dir, files, json_bytes(receipt))
    except OutputError as exc:
        charged = f"charged to the ledger (entry {receipt['hash'][:12]})" if receipt["ledger"] else ""
        raise OutputError(f"{exc}. The release was {charged or 'computed'} but its outputs are "
                          "incomplete (no receipt.json was written)") from exc
    result.receipt = receipt
    result.summary = release.summary
    return result
