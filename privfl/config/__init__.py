"""The job file: one core (parties, keys, TOML, fingerprint) and each mode's settings."""
