"""``--apply RULE``: score new rows with a released rule (post-processing: no privacy cost)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dpcausal.cli._run import status, stdout_console
from dpcausal.errors import SpecError


def apply_saved_rule(
    command: str,
    *,
    rule_path: Path,
    data: Path | None,
    out: Path | None,
    training: Path | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Write ``recommendations.csv`` (and ``.parquet`` for Parquet input) for the rows of ``data``
    (:func:`dpcausal.apply_rule`).

    Refuses the training file itself (``training``, when known): recommendations for the training
    rows are functions of their own sensitive covariates and are not covered by the guarantee.
    """
    from dpcausal.api import apply_rule
    from dpcausal.io.tables import table_format
    from dpcausal.io.writers import atomic_write, csv_bytes, parquet_bytes

    if data is None or out is None:
        raise SpecError("--apply needs --data NEW_ROWS and --out DIR (or a --spec that names them)")
    with status(f"dpcausal {command}: applying rule", quiet or as_json):
        recs = apply_rule(rule_path, data, command=command, training=training)
    written = [Path(out) / "recommendations.csv"]
    atomic_write(written[0], csv_bytes(recs))
    if Path(data).is_dir() or table_format(Path(data)) == "parquet":
        written.append(Path(out) / "recommendations.parquet")
        atomic_write(written[1], parquet_bytes(recs))
    summary = {"rows": len(recs), "output_paths": [str(p) for p in written],
               "privacy_cost": "none (post-processing of a released rule)"}
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not quiet:
        stdout_console().print(
            f"applied {rule_path} to {len(recs)} rows (post-processing, no privacy cost); "
            f"wrote {', '.join(map(str, written))}", markup=False)
