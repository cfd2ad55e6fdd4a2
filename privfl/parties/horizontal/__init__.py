"""The horizontal roles: aggregator, client, Shuffler; the privacy ledger."""
