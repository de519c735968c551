"""Privacy events, plans, budgets, the ledger and receipts."""
