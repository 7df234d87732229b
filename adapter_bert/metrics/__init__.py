"""Evaluation metrics: GLUE (as the leaderboard computes them) and SQuAD (official rules)."""
