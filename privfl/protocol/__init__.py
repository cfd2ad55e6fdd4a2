"""Typed messages, the msgpack codec and the ZeroMQ transport; knows nothing of training."""
