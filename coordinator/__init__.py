"""The admin side of dome: the only holder of the signing key.

Imports ledger and registry; never imports torch or klayout.
"""
