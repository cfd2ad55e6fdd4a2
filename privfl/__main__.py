"""Run the privfl command line with ``python -m privfl``."""

from privfl.cli import main

main()
