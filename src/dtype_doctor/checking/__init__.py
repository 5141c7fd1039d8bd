"""Check and audit: dtype mismatches found on the meta device, and the dtype map of a set-up."""
