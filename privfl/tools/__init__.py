"""Tools around the parties: benchmarks, the conformance kit, paper reproductions."""
