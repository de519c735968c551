"""The release commands: one package per command, and :data:`COMMANDS`, the one registry the CLI,
the pipeline's engine path and ``audit privacy`` read.

A command package ``dpcausal/commands/<name>/`` holds everything of one command: its spec model
(``spec.py``: ``<Section>Spec``), public setup (``setup.py``), privacy mechanisms (``privacy.py``),
plan (``plan.py``), in-memory run (``estimate.py``), the record the pipeline runs (``method.py``:
``METHOD``), optionally its engine path (``engine.py``: ``run``), its audit adapter (``audit.py``:
``ADAPTER``), its ``--apply`` support (``rule.py``) and its own helpers. Commands never import each
other; what several share lives in :mod:`dpcausal.commands.common`.

Entries name their parts by import path and are resolved only when used, so ``dpcausal --help``
and ``--version`` import no command (nor numpy, pandas or any method).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dpcausal.errors import SpecError


def _resolve(target: str) -> Any:
    """``"package.module:attribute"`` → the attribute (importing the module)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True, slots=True)
class Command:
    """One release command: its names and where its parts live.

    Parameters
    ----------
    name
        The CLI name (``dpcausal <name>``), e.g. ``select-policy``.
    help
        The ``--help`` text: a one-line summary, then optionally a blank line and more.
    engine
        Whether the package has an engine path (``engine.py`` with ``run``): the command then
        takes ``--engine`` / ``--engine-address`` and a spec ``engine`` section.
    rule
        Whether the command releases a rule that ``--apply RULE`` scores new rows with
        (``rule.py`` with ``apply_rule``; ``apply_defaults(spec)`` when a ``--spec`` may name the
        rows, the output directory and the training file).
    """

    name: str
    help: str
    engine: bool = False
    rule: bool = False

    @property
    def section(self) -> str:
        """The spec section named after the command (snake_case), e.g. ``select_policy``."""
        return self.name.replace("-", "_")

    @property
    def package(self) -> str:
        """The command's package, ``dpcausal.commands.<section>``."""
        return f"dpcausal.commands.{self.section}"

    def spec_model(self) -> Any:
        """The spec model class, ``spec.py``'s ``<Section>Spec`` (e.g. ``SelectPolicySpec``);
        importing it loads pydantic only, not the method."""
        model = "".join(part.title() for part in self.section.split("_")) + "Spec"
        return _resolve(f"{self.package}.spec:{model}")

    def method(self) -> Any:
        """The :class:`~dpcausal.method.MethodDef` the pipeline runs."""
        return _resolve(f"{self.package}.method:METHOD")

    def engine_run(self) -> Any:
        """The engine path's ``run``; SpecError when the command has none."""
        if not self.engine:
            raise SpecError(
                f"engine: '{self.name}' has no engine path yet (only "
                f"{', '.join(c.name for c in COMMANDS if c.engine)}); remove the spec's engine "
                "section and --engine to run it in memory")
        return _resolve(f"{self.package}.engine:run")

    def audit_adapter(self) -> Any:
        """The :class:`~dpcausal.audit.privacy.AuditAdapter` of ``audit privacy``."""
        return _resolve(f"{self.package}.audit:ADAPTER")

    def rule_module(self) -> Any:
        """The module with ``apply_rule`` (and maybe ``apply_defaults``) for ``--apply``."""
        assert self.rule, f"{self.name} releases no rule"
        return importlib.import_module(f"{self.package}.rule")


COMMANDS: tuple[Command, ...] = (
    Command("owl", "Release a DP treatment rule (DP-wERM, output perturbation), or --apply a saved "
            "one.", engine=True, rule=True),
    Command("select-policy", "Release one policy from a public library by the exponential "
            "mechanism (pure ε-DP).\n\nUtilities are sums of doubly robust (AIPW) scores over the "
            "scoring block; the sensitivity is certified for nuisances learned on the same data "
            "(Δ_cert = max{2B_ψ, n·ρ*}).", engine=True),
    Command("synth-control", "Release a DP synthetic-control counterfactual path and effect "
            "(DPSC_out)."),
    Command("cate", "Release τ(x) at query points or on a grid (R-/DR-learner, DP nuisances, GP or "
            "Gaussian noise).", engine=True),
    Command("two-stage", "Release a DP treatment rule (balancing weights + objective-perturbed "
            "ERM), or --apply one.", engine=True, rule=True),
)
"""Every release command, in the order ``dpcausal --help`` lists them. Adding a command is adding
its package and one line here."""


def by_name(name: str) -> Command:
    """The command called ``name`` on the command line; SpecError naming the choices if none."""
    for command in COMMANDS:
        if command.name == name:
            return command
    raise SpecError(f"unknown command '{name}'; choose one of: "
                    f"{', '.join(sorted(c.name for c in COMMANDS))}")
