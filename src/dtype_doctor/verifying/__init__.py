"""One verifier for every fix the tool shows: `verifier.verify(candidate, backend) -> Verdict` applies
one contract (contract.py) to what a back-end saw; one isolation (isolation.py, guard.py, rerun.py);
its three back-ends (verifier.Backend) live beside the machinery they run, above this layer:
watching/verify.py (the user's call replayed), checking/dry_replay.py (check's dry run on meta) and
patching/verify.py (the patched program re-run). See docs/verification.md."""
