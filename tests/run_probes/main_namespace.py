"""Probe: what __main__ holds and where imports come from, as `python` sets them up."""

import importlib.util
import sys

names = {k: v for k, v in globals().items() if k.startswith("__") and k != "__builtins__"}
for key in sorted(names):
    value = names[key]
    if key == "__loader__":
        value = f"{type(value).__name__} {value.name}"
    elif key == "__spec__" and value is not None:
        value = f"{value.name} {type(value.loader).__name__} {value.origin}"
    print(key, value)
print(type(__builtins__).__name__, sys.path[0], sys.argv[1:])
print("the working directory is on sys.path:", importlib.util.find_spec("in_cwd") is not None)
import sibling  # noqa: E402  (found beside the real file)

print(sibling.NAME)
