"""The privfl exception tree, named by who is at fault; the CLI maps them to exit codes."""

from __future__ import annotations


class PrivflError(Exception):
    """Root of every error privfl raises on purpose; its message says what to do next."""


class ConfigError(PrivflError):
    """The user's job file, flags or data are wrong (our user's fault)."""


class ProtocolError(PrivflError):
    """A peer sent something that breaks the protocol (the peer's fault)."""


class PeerUnavailable(PrivflError):
    """A peer did not answer within the job's timeout (the network's or the peer's fault)."""


class PeerAborted(PrivflError):
    """A peer told us it stopped because of its own error."""


class CryptoError(PrivflError):
    """Encrypted arithmetic left its safe range (overflow) or a key is unusable."""


class TrainingDiverged(PrivflError):
    """The optimisation left the region where the Taylor loss is meaningful."""


class PrivacyBudgetExceeded(PrivflError):
    """A release would spend more privacy budget than the job allows."""
