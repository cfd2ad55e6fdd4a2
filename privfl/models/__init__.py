"""The model kinds a vertical job can train, one registry entry each (models/registry.py)."""
