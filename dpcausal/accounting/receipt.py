"""Privacy receipts: the JSON record of one release, also the ledger line.

The receipt is built from the plan (public), the spec's hash, the output files' hashes and the ledger
state. It never holds data, data hashes, noise, or non-private fits. ``hash`` is the SHA-256 of the
canonical JSON of every other field, so a receipt (and the chain of them in a ledger) is tamper-evident.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dpcausal._version import __version__
from dpcausal.accounting.plan import PrivacyPlan

SCHEMA_VERSION = 2
"""2: keyed ledger fields (``seq``, ``mac``, ``ledger.ledger_id``, ``ledger.cap_source``);
``created_at`` is the run's start."""
GENESIS_HASH = "0" * 64


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the form that is hashed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def receipt_hash(receipt: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``receipt`` without its ``hash`` and ``mac`` fields."""
    body = {k: v for k, v in receipt.items() if k not in ("hash", "mac")}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def build_receipt(
    plan: PrivacyPlan,
    *,
    spec_sha256: str,
    outputs: dict[str, str],
    seeded_noise: bool,
    noise_source: str,
    dataset: str | None = None,
    engine: dict[str, Any] | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """Return a receipt without its ledger fields (``ledger``, ``seq``, ``prev_hash``, ``hash``,
    ``mac``).

    Parameters
    ----------
    plan
        The executed privacy plan.
    spec_sha256
        SHA-256 of the spec file as read.
    outputs
        Output path (as written, relative to the output directory) → SHA-256 of its bytes.
    seeded_noise
        True when the noise came from a test seed: the receipt then carries no DP guarantee.
    noise_source
        The privacy generator, for ``rng`` (e.g. ``"chacha20/os-entropy"``).
    dataset
        The ledger's dataset label, if any.
    engine
        Where the data passes ran, when an engine did (``kind``, ``description``); the key is
        absent for the in-memory path. Public facts only: not the number of passes, which follows
        the solvers' data-dependent iteration counts.
    """
    cost = plan.cost
    dp = plan.dp_guarantee and not seeded_noise
    receipt = {
        "schema_version": SCHEMA_VERSION,
        "tool": "dpcausal",
        "version": __version__,
        "command": plan.command,
        "created_at": created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "spec_sha256": spec_sha256,
        "dataset": dataset,
        "neighbouring": plan.neighbouring,
        "guarantee": plan.guarantee if dp else "none",
        "dp_guarantee": dp,
        "epsilon": cost.epsilon,
        "delta": cost.delta,
        "composition": "basic",
        "numerics": "float64",
        "events": [e.to_dict() for e in plan.events],
        "assumptions": plan.assumptions,
        "outputs": [{"path": p, "sha256": h} for p, h in outputs.items()],
        "rng": noise_source,
    }
    if engine is not None:
        receipt["engine"] = engine
    return receipt


def finalize(receipt: dict[str, Any], prev_hash: str | None) -> dict[str, Any]:
    """Return ``receipt`` with ``prev_hash`` and its own ``hash`` set."""
    out = dict(receipt)
    out["prev_hash"] = prev_hash
    out["hash"] = receipt_hash(out)
    return out


def is_finite_number(x: Any) -> bool:
    """True for a finite int/float (not bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
