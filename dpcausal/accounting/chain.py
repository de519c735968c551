"""The keyed hash chain of a ledger and its head record: storage-independent, no I/O.

Every ledger line (a *record*) carries ``seq`` (its 1-based position), ``prev_hash`` (the previous
record's ``hash``), ``hash`` (SHA-256 of the canonical JSON of every other field except ``mac``) and
``mac`` = HMAC-SHA256(key, hash). The key is a secret of the ledger's owner, kept beside the ledger
(file) or given to every job from outside (database: never stored in it). The head record
``{ledger_id, count, last_hash, mac, ...}`` names the last committed record; it is replaced
atomically after each append (file) or appended in the same transaction (database).

What this detects (without the key an attacker cannot recompute a ``mac``):

- an edited record (its ``hash`` or ``mac`` no longer matches);
- a dropped, inserted or reordered record, even when the rest is re-chained (``seq``,
  ``prev_hash`` and the ``mac`` of every later record);
- truncation at any byte or line boundary, a deleted last record, an emptied ledger: the head
  says more records were committed than are present, or its ``last_hash`` differs.

What it cannot detect: a holder of the key can rewrite anything; replacing the ledger *and* its
head by an older consistent copy (a rollback) or deleting ledger, head and key together leaves no
local trace; kept receipts (which name the record they were charged at) reveal both.

Ledgers written before the key existed (*legacy*, unkeyed SHA-256 chain) are taken over by an
``ledger-adopt`` record that names the last legacy hash: from then on the legacy lines are pinned
by the adopt record's ``mac``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from dpcausal.accounting.receipt import GENESIS_HASH, canonical_json, receipt_hash

FORMAT = 2
"""Format of keyed ledgers (1 was the unkeyed chain)."""

KEY_BYTES = 32
INIT_KINDS = ("ledger-init", "ledger-adopt")


def new_key() -> bytes:
    """A fresh 256-bit ledger key from OS entropy."""
    return secrets.token_bytes(KEY_BYTES)


def new_ledger_id() -> str:
    """A random public identifier of a ledger (receipts carry it)."""
    return secrets.token_hex(16)


def mac_of(key: bytes, text: str) -> str:
    """Hex HMAC-SHA256 of ``text`` under ``key``."""
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def seal(body: Mapping[str, Any], *, seq: int, prev_hash: str, key: bytes) -> dict[str, Any]:
    """Return ``body`` as the ``seq``-th record after ``prev_hash``, hashed and keyed."""
    out = {k: v for k, v in body.items() if k not in ("seq", "prev_hash", "hash", "mac")}
    out["seq"] = seq
    out["prev_hash"] = prev_hash
    out["hash"] = receipt_hash(out)
    out["mac"] = mac_of(key, out["hash"])
    return out


def seal_all(bodies: Sequence[Mapping[str, Any]], *, after: Sequence[Mapping[str, Any]],
             key: bytes) -> list[dict[str, Any]]:
    """Seal ``bodies`` in order as the records following ``after`` (a ledger's records)."""
    prev = str(after[-1]["hash"]) if after else GENESIS_HASH
    sealed: list[dict[str, Any]] = []
    for seq, body in enumerate(bodies, start=len(after) + 1):
        sealed.append(seal(body, seq=seq, prev_hash=prev, key=key))
        prev = sealed[-1]["hash"]
    return sealed


def record_json(rec: Mapping[str, Any]) -> str:
    """A record as stored: one JSON line of the file, one row of a database (same text)."""
    return json.dumps(rec, sort_keys=True, allow_nan=False)


def record_problem(rec: Mapping[str, Any], *, pos: int, prev: str, key: bytes | None) -> str | None:
    """Why the record at 1-based ``pos`` cannot be trusted, or None.

    ``key`` None checks a legacy (unkeyed) record: chain and hash only.
    """
    if rec.get("prev_hash") != prev:
        return ("hash chain broken: prev_hash does not match the previous line (a line was "
                "removed, inserted or reordered)")
    if receipt_hash(rec) != rec.get("hash"):
        return "its hash does not match its content (edited after writing)"
    if key is None:
        if "mac" in rec or "seq" in rec:
            return "a keyed line before the ledger's adopt line"
        return None
    if rec.get("seq") != pos:
        return f"it says it is line {rec.get('seq')!r} (a line was removed, inserted or reordered)"
    mac = rec.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, mac_of(key, str(rec["hash"]))):
        return ("its keyed MAC does not verify (written or re-chained without the ledger's key, "
                "or the key file is not this ledger's)")
    return None


def legacy_prefix(records: Sequence[Mapping[str, Any]]) -> int | None:
    """Number of unkeyed lines before the ledger's init/adopt record; None if there is none."""
    for i, rec in enumerate(records):
        if rec.get("kind") in INIT_KINDS:
            return i
    return None


def check_chain(records: Sequence[Mapping[str, Any]], key: bytes) -> list[tuple[int, str]]:
    """Every problem of a keyed ledger's records, as (1-based line, reason); empty when sound."""
    problems: list[tuple[int, str]] = []
    start = legacy_prefix(records)
    if start is None:
        return [(1, "no ledger-init or ledger-adopt line: not a keyed dpcausal ledger")]
    if start > 0 and records[start].get("kind") != "ledger-adopt":
        problems.append((start + 1, "unkeyed lines before the ledger-init line"))
    prev = GENESIS_HASH
    for pos, rec in enumerate(records, start=1):
        problem = record_problem(rec, pos=pos, prev=prev, key=key if pos > start else None)
        if problem is None and pos == start + 1 and start > 0:
            adopted = rec.get("adopted") or {}
            if adopted.get("lines") != start or adopted.get("last_hash") != prev:
                problem = "the adopt line does not name the legacy lines before it"
        if problem is None and pos > start + 1 and rec.get("kind") in INIT_KINDS:
            problem = "a second ledger-init/adopt line"
        if problem:
            problems.append((pos, problem))
        prev = str(rec.get("hash", ""))
    return problems


def check_legacy_chain(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """Problems of an unkeyed (format 1) ledger: chain and hashes only."""
    problems: list[tuple[int, str]] = []
    prev = GENESIS_HASH
    for pos, rec in enumerate(records, start=1):
        problem = record_problem(rec, pos=pos, prev=prev, key=None)
        if problem:
            problems.append((pos, problem))
        prev = str(rec.get("hash", ""))
    return problems


def make_head(key: bytes, *, ledger_id: str, count: int, last_hash: str,
              **extra: Any) -> dict[str, Any]:
    """The head record after ``count`` committed records (``extra``: store facts, e.g. size)."""
    head = {"format": FORMAT, "ledger_id": ledger_id, "count": count, "last_hash": last_hash,
            **extra}
    head["mac"] = mac_of(key, canonical_json(head))
    return head


def head_problems(head: Mapping[str, Any], key: bytes, records: Sequence[Mapping[str, Any]],
                  ledger_id: str | None) -> list[str]:
    """Why ``head`` and ``records`` disagree (truncation, deletion, rewrite); empty when sound.

    Records after ``head['count']`` are allowed: a run killed after its append, before the head
    was replaced, left them (charged, never published).
    """
    body = {k: v for k, v in head.items() if k != "mac"}
    mac = head.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, mac_of(key, canonical_json(body))):
        return ["the head record's MAC does not verify (edited, or not this ledger's key)"]
    if head.get("ledger_id") != ledger_id:
        return [f"the head record belongs to ledger {head.get('ledger_id')!r}, not {ledger_id!r}"]
    count = head.get("count")
    if not isinstance(count, int) or count < 1:
        return ["the head record has no valid count"]
    if len(records) < count:
        return [f"the head record says {count} line(s) were committed but only {len(records)} "
                "are present: committed lines were removed (truncated, deleted or emptied)"]
    if records[count - 1].get("hash") != head.get("last_hash"):
        return [f"line {count} is not the line the head record committed (its hash differs): "
                "history was rewritten"]
    return []
