"""mlenv.cli."""
