"""The append-only, hash-chained ControlEvent ledger. Imports registry only."""
