"""The Python API: plan and release from notebooks and pipelines (``import dpcausal as dpc``).

The command line is a thin layer over it: ``dpcausal <command>`` calls :func:`release` (or
:func:`plan` for ``--dry-run``), ``dpcausal audit`` calls :func:`verify`, :func:`audit_privacy`
and :func:`ledger.repair`, ``dpcausal ledger`` the functions of :mod:`dpcausal.api.ledger`; so
both refuse exactly the same things, charge the same ledger and write the same receipts and
lines. ``dpcausal/__init__.py`` exposes these names lazily.
"""

from dpcausal.api import ledger
from dpcausal.api.audit import audit_privacy, verify
from dpcausal.api.results import Plan, Release
from dpcausal.api.rules import apply_rule
from dpcausal.api.run import plan, release
from dpcausal.api.specs import CommandName, build_spec, command_of, load_spec, schema, spec_sha256

__all__ = ["CommandName", "Plan", "Release", "apply_rule", "audit_privacy", "build_spec",
           "command_of", "ledger", "load_spec", "plan", "release", "schema", "spec_sha256",
           "verify"]
