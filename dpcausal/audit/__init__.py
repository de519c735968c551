"""Audits: receipt and ledger verification; empirical privacy auditing."""
