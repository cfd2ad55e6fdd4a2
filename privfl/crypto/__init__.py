"""Paillier encryption, fixed-point encoding and masking for the vertical protocol."""
