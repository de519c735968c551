"""Declared, row-local preprocessing of the covariates (issue #20): the spec's ``preprocess``
section turned into the model's numeric, bounded covariates, and the checks of every cell of a
file's columns, reported all at once. See :mod:`dpcausal.preprocess.preprocessor`."""

from __future__ import annotations

from typing import Any

from dpcausal.errors import SpecError
from dpcausal.preprocess.cells import Problems
from dpcausal.preprocess.preprocessor import Preprocessor, Roles
from dpcausal.preprocess.rules import Source


def declared_arms(spec: Any) -> tuple[str, tuple[Any, ...]] | None:
    """``(section, labels)`` of the treatment arms the command's section declares (treated
    first), or None when it declares none (e.g. synth-control)."""
    for name in type(spec).model_fields:
        section: Any = getattr(spec, name, None)
        if hasattr(section, "treated") and hasattr(section, "labels"):
            return name, tuple(section.labels())
    return None


def _binary_hint(section: Any) -> str:
    """The fix added for a command whose method takes two arms only, or, for a command that also
    takes K ≥ 3 arms and was given two, the pointer to its ``arms``."""
    if not hasattr(section, "multi_arm_why"):
        if hasattr(section, "arms") and getattr(section, "arms", None) is None:
            return f", or list every arm the file uses in {section.section}.arms"
        return ""
    return (f"; {section.command} takes two arms only ({section.multi_arm_why}): collapse any "
            "other arm into these two, by a rule applied to every row")


def for_spec(spec: Any) -> Preprocessor:
    """The preprocessing ``spec`` declares (inactive without a ``preprocess`` section), with the
    checks of the outcome and of the treatment's declared labels (for a command that declares
    its arms). Reads no row."""
    sec = spec.preprocess
    covariates = list(spec.data.columns.covariates)
    rules = dict(sec.covariates) if sec is not None else {}
    unknown = [c for c in rules if c not in covariates]
    if unknown:
        raise SpecError(f"preprocess.covariates: {', '.join(map(repr, unknown))} not in "
                        "data.columns.covariates; a rule applies to a declared covariate",
                        field="preprocess.covariates")
    bounds = spec.bounds.covariates
    for c, rule in rules.items():
        if rule.levels is not None and isinstance(bounds, dict) and c in bounds:
            raise SpecError(f"bounds.covariates.{c}: {c} is categorical (preprocess.covariates."
                            f"{c}.levels); its level columns are in [0, 1] by construction: "
                            "remove its bound", field=f"bounds.covariates.{c}")
    sources = tuple(Source.from_rule(c, rules.get(c), spec.bounds.covariate(c))
                    for c in covariates)
    arms = declared_arms(spec)
    cols = spec.data.columns
    # the outcome and treatment of a command with declared arms (synth-control's panel has its
    # own checks, naming the unit and the period)
    roles = Roles(cols.outcome, cols.treatment, arms[1], arms[0],
                  _binary_hint(getattr(spec, arms[0]))) if arms else Roles()
    interactions = tuple(tuple(t) for t in sec.interactions) if sec is not None else ()
    return Preprocessor(sources, interactions, roles, active=sec is not None)


__all__ = ["Preprocessor", "Problems", "Roles", "declared_arms", "for_spec"]
