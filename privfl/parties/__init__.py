"""Every role of both modes, and what they share: the session, checkpoints, the audit log."""
