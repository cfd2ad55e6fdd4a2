"""privfl: privacy-preserving federated learning (vertical Paillier LR, horizontal LDP)."""

__version__ = "0.1.0"
