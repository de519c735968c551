"""Stage, charge and publish one release, whole (DESIGN §1.2's last steps).

Every output is staged first (a full disk is found while nothing is spent), then the ledger is
charged under its lock, then the receipt is added and the release renamed into place in one step.
A failure before the charge spends nothing; after it, the error says "charged, not published" and
the previous release stays in place. No output is ever published without its receipt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.receipt import finalize
from dpcausal.errors import OutputError
from dpcausal.io.release_dir import RECEIPT, ReleaseDir, Staged
from dpcausal.io.writers import csv_bytes, json_bytes, parquet_bytes
from dpcausal.method import Release


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


def release_version(receipt: dict[str, Any]) -> str:
    """The published release's name: ``<seq>-<hash[:12]>`` (``<hash[:12]>`` without a ledger)."""
    return (f"{receipt['seq']:06d}-{receipt['hash'][:12]}" if receipt.get("seq")
            else receipt["hash"][:12])


def charge_and_publish(out: ReleaseDir | None, files: dict[str, bytes], receipt: dict[str, Any],
                       charge: Charge) -> tuple[dict[str, Any], list[Path]]:
    """Stage ``files``, charge the ledger, then publish the release with its receipt, whole.

    Returns the receipt as charged and the published paths (the receipt last). A failure while
    staging or charging spends nothing and publishes nothing; a failure after the charge raises
    OutputError saying "charged, not published" and leaves the previous release in place.
    ``out=None`` (the API's in-memory release): charge only; nothing is written, and
    :func:`publish` may write the release later.
    """
    staged = None
    if out is not None:
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
        if staged is not None:
            staged.discard()
        raise
    if out is None:
        return final, []
    assert staged is not None
    return final, _publish_staged(out, staged, final, charged=True)


def publish(out: ReleaseDir, files: dict[str, bytes], receipt: dict[str, Any]) -> list[Path]:
    """Publish an already charged release (``files`` and its ``receipt``) into ``out``, whole:
    staged, then renamed in place (the API's ``Release.save``). Spends nothing."""
    out.preflight()
    staged = out.stage(files)
    return _publish_staged(out, staged, receipt, charged=False)


def _publish_staged(out: ReleaseDir, staged: Staged, final: dict[str, Any], *,
                    charged: bool) -> list[Path]:
    try:
        staged.add(RECEIPT, json_bytes(final))
        return staged.publish(release_version(final))
    except BaseException as exc:
        staged.discard()
        if not isinstance(exc, OSError | OutputError):
            raise
        if not charged:
            what = "not written (its budget was spent when it was released)"
        elif final.get("seq"):
            what = (f"charged, not published: the budget of this run is spent (ledger line "
                    f"{final['seq']}, hash {final['hash'][:12]})")
        else:
            what = "computed, not published"
        raise OutputError(f"{exc}. The release was {what}; nothing was written to {out.out}, and "
                          "the previous release there (if any) is intact") from exc
