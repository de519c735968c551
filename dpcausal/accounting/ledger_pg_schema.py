"""The PostgreSQL ledger's schema: tables, append-only triggers, the grants a job needs.

Schema ``dpcausal``, one ledger per database, created by ``dpcausal ledger init`` (or ``import``)
in the same transaction as the ledger's first records:

- ``schema_version(version, tool_version)`` — :data:`SCHEMA_VERSION` (a newer one is refused:
  upgrade dpcausal);
- ``records(seq, record)`` — one row per ledger line: ``seq`` its 1-based position, ``record`` the
  exact JSON text a file ledger holds on that line;
- ``heads(count, head)`` — one keyed head record per committed transaction.

Triggers refuse UPDATE, DELETE and TRUNCATE on every table (for the owner too, unless it disables
them); nothing is granted to PUBLIC. No column holds a server time: the time a row was written
would publish how long its run took.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

TABLES = ("schema_version", "records", "heads")
DDL = (
    "CREATE SCHEMA dpcausal",
    "CREATE TABLE dpcausal.schema_version (version integer PRIMARY KEY, tool_version text NOT NULL)",
    "CREATE TABLE dpcausal.records (seq bigint PRIMARY KEY CHECK (seq >= 1), record text NOT NULL)",
    "CREATE TABLE dpcausal.heads (count bigint PRIMARY KEY CHECK (count >= 1), head text NOT NULL)",
    """CREATE FUNCTION dpcausal.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'the dpcausal ledger is append-only: % on %.% refused',
             TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
       END $$""",
    *(stmt.format(t=t) for t in TABLES for stmt in (
        "CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON dpcausal.{t} "
        "FOR EACH ROW EXECUTE FUNCTION dpcausal.refuse_change()",
        "CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON dpcausal.{t} "
        "FOR EACH STATEMENT EXECUTE FUNCTION dpcausal.refuse_change()",
        "REVOKE ALL ON dpcausal.{t} FROM PUBLIC"))
)
GRANTS = (
    "GRANT USAGE ON SCHEMA dpcausal TO {role}",
    "GRANT SELECT ON dpcausal.schema_version, dpcausal.records, dpcausal.heads TO {role}",
    "GRANT INSERT ON dpcausal.records, dpcausal.heads TO {role}",
)
"""What the role of a job needs (documented in the README; nothing more)."""
