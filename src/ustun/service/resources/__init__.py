"""The reference service's business resources: payments, ledger accounts, transfers,
documents, reports."""
