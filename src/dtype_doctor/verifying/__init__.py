"""One verifier for every fix the tool shows: one contract (contract.py), one isolation
(isolation.py, guard.py, rerun.py); the back-ends are watching/verify.py (the live call replayed),
checking/fix_replay.py (check's dry run on meta) and patching/verify.py (the patched program re-run).
See docs/verification.md."""
