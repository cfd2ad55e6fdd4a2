"""One state machine per role: the vertical Server, Host and Guest."""
