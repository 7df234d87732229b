"""Training: optimizer, distribution strategy and the fit-with-resume loop."""
