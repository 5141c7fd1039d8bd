"""catalog/family_codes.py: one constant per family, and no constant without a family."""

from __future__ import annotations

import subprocess
import sys

from dtype_doctor.catalog import FAMILIES, family_codes


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(family_codes).items() if name.isupper()}


def test_every_family_has_its_constant_and_every_constant_is_a_family():
    constants = _constants()
    codes = {f.code for f in FAMILIES}
    assert set(constants.values()) == codes
    for name, value in constants.items():
        assert name == value.upper().replace("-", "_"), name
    assert family_codes.MATMUL_DTYPE_MISMATCH == "matmul-dtype-mismatch"


def test_family_codes_import_no_torch():
    code = "import sys, dtype_doctor.catalog.family_codes; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
