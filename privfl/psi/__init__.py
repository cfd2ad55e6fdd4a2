"""Private set intersection of id columns: ristretto255 ECDH (default) or RSA blind signatures."""
