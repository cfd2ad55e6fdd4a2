"""Horizontal mode: clients with local DP, a FedAvg/FedProx aggregator, a Shuffler, a ledger."""
