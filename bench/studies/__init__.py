"""Studies: one-off questions whose findings the docs state (their records stay in
bench/results/)."""
