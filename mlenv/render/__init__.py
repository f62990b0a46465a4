"""mlenv.render."""
