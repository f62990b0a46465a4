"""mlenv.cluster."""
