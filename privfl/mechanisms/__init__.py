"""Pure privacy mechanisms: numpy (or torch) in, numbers out; nothing here talks to a peer."""
