"""``--apply RULE``: score new rows with a released rule (post-processing: no privacy cost)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.cli._run import status, stdout_console
from dpcausal.errors import DataError, DPCausalError, SpecError

if TYPE_CHECKING:
    import pandas as pd


def apply_saved_rule(
    command: str,
    apply_rule: Callable[[Any, pd.DataFrame, Path, Path], pd.DataFrame],
    *,
    rule_path: Path,
    data: Path | None,
    out: Path | None,
    training: Path | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Write ``recommendations.csv`` (and ``.parquet`` for Parquet input) for the rows of ``data``.

    Refuses the training file itself (``training``, when known): recommendations for the training
    rows are functions of their own sensitive covariates and are not covered by the guarantee.
    """
    from dpcausal.frames import same_file
    from dpcausal.io.tables import inspect_table, read_table
    from dpcausal.io.writers import atomic_write, csv_bytes, parquet_bytes

    if data is None or out is None:
        raise SpecError("--apply needs --data NEW_ROWS and --out DIR (or a --spec that names them)")
    if training is not None and same_file(data, training):
        raise SpecError(
            f"--data {data} is the spec's training data; recommendations for the training rows "
            "are functions of their own sensitive covariates and are not covered by the guarantee"
        )
    try:
        doc = json.loads(Path(rule_path).read_text())
    except FileNotFoundError as exc:
        raise DataError(f"{rule_path}: rule file not found; check the --apply path",
                        file=rule_path) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{rule_path}: cannot read the rule file as JSON ({exc})",
                        file=rule_path) from exc
    made_by = doc.get("command") if isinstance(doc, dict) else None
    if made_by != command:  # checked before any row is read
        hint = (f"it is a {made_by} rule: apply it with 'dpcausal {made_by} --apply'"
                if isinstance(made_by, str) and made_by else "it names no command")
        raise DataError(f"{rule_path}: not a dpcausal {command} rule file ({hint})",
                        file=rule_path)
    prep = _rule_preprocessing(doc, rule_path)  # checked before any row is read
    info = inspect_table(data, "data file to score")
    with status(f"dpcausal {command}: applying rule", quiet or as_json):
        frame = read_table(data, list(info.columns), "data file to score")
        if prep is not None:  # the raw columns become the rule's model columns, as in training
            frame = prep.side_table(frame, data, "data file to score")
        recs = apply_rule(doc, frame, data, rule_path)
    written = [Path(out) / "recommendations.csv"]
    atomic_write(written[0], csv_bytes(recs))
    if info.format == "parquet":
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


def _rule_preprocessing(doc: dict[str, Any], rule_path: Path) -> Any:
    """The rule's declared preprocessing (None when it has none), or a DataError."""
    if "preprocessing" not in doc:
        return None
    from dpcausal.preprocess import Preprocessor

    try:
        return Preprocessor.from_description(doc["preprocessing"])
    except (DPCausalError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{rule_path}: its 'preprocessing' is not valid ({type(exc).__name__}); "
                        "use the rule file as released", file=rule_path) from exc
