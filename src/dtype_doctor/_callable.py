"""Public functions that share their name with their module (`dtype_doctor.check` is both).

Importing a submodule sets the package attribute to the module, shadowing the function that the
package's lazy `__getattr__` put there; a callable module keeps `dtype_doctor.check(...)` working
whichever import came first.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def make_callable(module_name: str, function_name: str) -> None:
    class _CallableModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(self, function_name)(*args, **kwargs)

    sys.modules[module_name].__class__ = _CallableModule
