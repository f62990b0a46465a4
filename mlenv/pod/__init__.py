"""mlenv.pod."""
