"""Private set intersection of id columns: RSA blind signatures (default) or X25519 ECDH."""
