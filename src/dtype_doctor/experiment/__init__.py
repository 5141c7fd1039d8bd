"""The experiment: what is tried to find the root, in re-runs of the user's program (never in it)."""
