"""Loading the bundled demo data and each party's view of it."""
