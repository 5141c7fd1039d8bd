"""The facts about this machine and its packages that decide which precisions can work."""
