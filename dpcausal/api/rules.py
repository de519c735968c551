"""Score new rows with a released rule (``dpcausal owl|two-stage --apply RULE``): post-processing
of a released rule, so it costs no privacy budget and touches no ledger."""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.commands import COMMANDS
from dpcausal.errors import DataError, DPCausalError, SpecError
from dpcausal.io import memory

if TYPE_CHECKING:
    import pandas as pd

    from dpcausal.api.results import Release


def read_rule(rule: Release | Mapping[str, Any] | str | PathLike[str]) -> tuple[dict[str, Any],
                                                                               Path | None]:
    """The rule document (and its file, when read from one): a :class:`~dpcausal.Release`'s
    ``rule.json``, a mapping, or a path to a ``rule.json``."""
    if isinstance(rule, str | PathLike):
        path = Path(rule)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise DataError(f"{path}: rule file not found; check the --apply path",
                            file=path) from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: cannot read the rule file as JSON ({exc})",
                            file=path) from exc
        return doc, path
    if isinstance(rule, Mapping):
        return dict(rule), None
    documents = getattr(rule, "documents", None)
    if isinstance(documents, Mapping) and "rule.json" in documents:
        return dict(documents["rule.json"]), None
    raise TypeError("rule must be a Release with a rule.json, a rule document (a dict) or the "
                    f"path of a rule.json; got {type(rule).__name__}")


def apply_rule(rule: Release | Mapping[str, Any] | str | PathLike[str], data: Any, *,
               command: str | None = None,
               training: str | PathLike[str] | None = None) -> pd.DataFrame:
    """The rows of ``data`` with the rule's recommendation (and its margin and noise band).

    Parameters
    ----------
    rule
        A release of ``owl`` or ``two-stage``, its ``rule.json`` document, or that file's path.
    data
        The rows to score: a path, a pandas DataFrame or a pyarrow Table, with the rule's
        covariates (and any other column, passed through).
    command
        Refuse a rule another command released (the command line names its own); default: the
        command the rule names.
    training
        The training data file, refused as rows to score: recommendations for the training rows
        are functions of their own sensitive covariates and are not covered by the guarantee.

    Raises
    ------
    DataError
        The rule cannot be read or is not a rule of ``command``, or the rows do not fit it (exit
        code 2 on the command line).
    """
    from dpcausal.frames import same_file
    from dpcausal.io.tables import inspect_table, read_table

    table = memory.as_memory_table(data)
    if table is None and not isinstance(data, str | PathLike):
        raise TypeError("data must be a pandas DataFrame, a pyarrow Table or a path; got "
                        f"{type(data).__name__}")
    if table is None and training is not None and same_file(Path(data), Path(training)):
        raise SpecError(
            f"--data {data} is the spec's training data; recommendations for the training rows "
            "are functions of their own sensitive covariates and are not covered by the guarantee"
        )
    doc, rule_path = read_rule(rule)
    where = rule_path if rule_path is not None else "the rule"
    made_by = doc.get("command")
    rules = {c.name: c for c in COMMANDS if c.rule}
    if command is not None and made_by != command:  # checked before any row is read
        hint = (f"it is a {made_by} rule: apply it with 'dpcausal {made_by} --apply'"
                if isinstance(made_by, str) and made_by else "it names no command")
        raise DataError(f"{where}: not a dpcausal {command} rule file ({hint})", file=rule_path)
    if made_by not in rules:
        raise DataError(f"{where}: not a rule released by {' or '.join(rules)} (it names "
                        f"{made_by!r})", file=rule_path)
    prep = _rule_preprocessing(doc, rule_path, where)  # checked before any row is read
    what = "data file to score"
    if table is None:
        info = inspect_table(Path(data), what)
        frame = read_table(info.path, list(info.columns), what)
        source: Any = info.path
    else:
        with memory.registered(table) as label:
            info = inspect_table(label, what)
            frame = read_table(label, list(info.columns), what)
            source = label
    if prep is not None:  # the raw columns become the rule's model columns, as in training
        frame = prep.side_table(frame, source, what)
    return rules[made_by].rule_module().apply_rule(doc, frame, source, rule_path)


def _rule_preprocessing(doc: dict[str, Any], rule_path: Path | None, where: Any) -> Any:
    """The rule's declared preprocessing (None when it has none), or a DataError."""
    if "preprocessing" not in doc:
        return None
    from dpcausal.preprocess import Preprocessor

    try:
        return Preprocessor.from_description(doc["preprocessing"])
    except (DPCausalError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: its 'preprocessing' is not valid ({type(exc).__name__}); "
                        "use the rule file as released", file=rule_path) from exc
