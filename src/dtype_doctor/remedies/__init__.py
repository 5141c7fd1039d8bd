"""Remedies: the one place a `Fix` is built.

A remedy is a `FixTemplate` (`model.py`): its text, the evidence it needs to apply, and the edit
builder that writes its snippet (`builders.py`). The templates belong to the catalog (each family's
ranked fixes, and the shared remedies of `catalog/shared_remedies.py`); producers hand the processor
(`processor.py`) a template and their evidence (the user's names, the dtype wanted, the file:line
where the snippet is pasted), and the processor makes it concrete, in the user's own names, and
ranks it. No torch import.
"""

from __future__ import annotations

from .model import FixTemplate
from .names import module_ref
from .processor import behind_verified, cure, first, in_user_names, literal, make, ranked, revise

__all__ = [
    "FixTemplate",
    "behind_verified",
    "cure",
    "first",
    "in_user_names",
    "literal",
    "make",
    "module_ref",
    "ranked",
    "revise",
]
