"""Vertical SecureBoost: the Host holds the labels and the key, guests send encrypted histograms."""
