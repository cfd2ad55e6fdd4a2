"""The command line: `privfl` and its subcommands, each loaded only when it runs."""
