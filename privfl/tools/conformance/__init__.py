"""``privfl conformance``: a scripted peer that checks a running party against the protocol.

The party under test runs with its ordinary command. This tool plays every
party that one talks to (binding their endpoints with their keys from the kit),
walks it through the protocol (docs/protocol.md), sends it invalid messages that
must be refused without effect, checks every answer, and ends either with a
Finish (the party must exit cleanly) or with a fatal protocol violation (the
party must Abort, naming it). Every role can be checked; the host needs a job
with demo columns (the tool must know each guest's row counts). Every model kind has
its scripts for every role (the registry's ``conformance`` map), for a training
session and, keyed ``predict:<role>``, for a prediction session (``--session
predict``: predict.py, predict_server.py, boost_predict.py). Given the party's
command, the tool starts it and checks its exit status too. See docs/conformance.md.
"""
