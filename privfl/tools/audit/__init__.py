"""``privfl audit``: the parties' hash-chained audit logs checked, alone and against each other.

:mod:`.chain` checks one log's chain, :mod:`.crosscheck` matches the logs of one
session message by message, :mod:`.verify` reads the logs and writes the export.
"""
