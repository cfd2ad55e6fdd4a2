"""When this process started, so a command's wall time includes its own start-up.

A run's printed wall time should be what its user waited: interpreter start, imports,
key generation and the parties' start-up included, not only the training loop.
"""

from __future__ import annotations

import os
import time

# Fallback where /proc is missing: the first import of this module (after the CLI's).
_IMPORTED = time.time()


def process_started() -> float:
    """The wall-clock time (``time.time()`` scale) at which this process started.

    Linux gives the start in clock ticks since boot (/proc/self/stat, field 22), which
    /proc/uptime turns into an age; elsewhere it is this module's first import.
    """
    try:
        with open("/proc/self/stat") as handle:
            # The command name may hold spaces: the fields after it follow the last ')'.
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED
    return time.time() - max(0.0, age)
