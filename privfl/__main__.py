"""Run the privfl command line with ``python -m privfl``."""

from privfl.cli.vfl import main

main()
