"""`[tool.dtype-doctor]` in pyproject.toml: the project's defaults for every command.

Found by walking up from the working folder to the first pyproject.toml that has the table; read
with `tomllib` (Python 3.11+) or `tomli` (a dependency on 3.10; an install without it skips the
table with a one-line note). Keys become the defaults of the options of the same name, so a flag on
the command line overrides them:

    [tool.dtype-doctor]
    mode = "strict"            # run --mode
    numerics = true            # run --numerics
    budget = 120               # run --budget: seconds the experiment may re-run the program (0: none)
    ignore = ["fp32-island"]   # --ignore CODE (the command line adds to these)
    fail-on = "warning"        # --fail-on
    thresholds = { tolerance = 0.05, top-k = 2 }   # numeric options by name (compare --tolerance ...)
    check = [{ target = "model.py:build", input = ["2x16:float16"], dtype = "float16" }]   # precommit
    audit = [{ target = "model.py:build", dtype = "float16" }]                      # precommit
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import DoctorError
from ._output import family_code as _output_family_code

TABLE = "dtype-doctor"
_OPTIONS = ("mode", "numerics", "ignore", "fail-on", "budget")
_JOBS = ("check", "audit")  # what `dtype-doctor precommit` runs


def _toml() -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli if installed
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return None
    return tomllib


def find(start: str | os.PathLike[str] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(the pyproject.toml, its `[tool.dtype-doctor]` table) nearest above `start` (default: the
    working folder), or None. A pyproject.toml without the table does not stop the walk."""
    toml = None
    folder = Path(start or os.getcwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if not path.is_file():
            continue
        toml = toml or _toml()
        if toml is None:
            print(
                f"dtype-doctor: {path} not read: this Python has no tomllib (pip install tomli)",
                file=sys.stderr,
            )
            return None
        try:
            data = toml.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, toml.TOMLDecodeError) as exc:  # maybe not ours: say so, go on
            print(f"dtype-doctor: {path} not read ({exc}); going on without it", file=sys.stderr)
            continue
        table = data.get("tool", {}).get(TABLE)
        if isinstance(table, dict):
            return path, table
    return None


def _dest(key: str) -> str:
    return key.replace("-", "_")


def settings(table: dict[str, Any], where: Path) -> dict[str, Any]:
    """The table as option defaults by argparse dest (`fail-on` → fail_on, thresholds flattened)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in _OPTIONS:
            out[_dest(key)] = list(value) if key == "ignore" and isinstance(value, list) else value
        elif key == "thresholds":
            if not isinstance(value, dict):
                raise DoctorError(
                    f"{where}: [tool.{TABLE}] thresholds is a table ({{ tolerance = 0.05 }}), not {value!r}"
                )
            out.update({_dest(k): v for k, v in value.items()})
        elif key not in _JOBS:
            raise DoctorError(
                f"{where}: [tool.{TABLE}] has no key {key!r} (known: {', '.join((*_OPTIONS, 'thresholds', *_JOBS))})"
            )
    if "ignore" in out and not (
        isinstance(out["ignore"], list) and all(isinstance(c, str) for c in out["ignore"])
    ):
        raise DoctorError(f"{where}: [tool.{TABLE}] ignore is a list of family codes")
    return out


def apply(parser: argparse.ArgumentParser, found: tuple[Path, dict[str, Any]] | None) -> None:
    """Make the config's values the defaults of the parser's options of the same name (flags given
    on the command line override them); a value the option cannot take is refused with one line."""
    if found is None:
        return
    where, table = found
    actions = {a.dest: a for a in parser._actions}
    defaults: dict[str, Any] = {}
    for dest, value in settings(table, where).items():
        action = actions.get(dest)
        if action is None:
            continue  # another command's option (mode is run's)
        if action.choices is not None and value not in action.choices:
            raise DoctorError(
                f"{where}: {dest.replace('_', '-')} = {value!r}: choose from {', '.join(map(str, action.choices))}"
            )
        name = dest.replace("_", "-")
        if isinstance(action, argparse._StoreTrueAction) and not isinstance(value, bool):
            raise DoctorError(f"{where}: {name} = {value!r}: a boolean (true or false)")
        if dest == "ignore":
            try:
                value = [_output_family_code(code) for code in value]
            except argparse.ArgumentTypeError as exc:
                raise DoctorError(f"{where}: ignore: {exc}") from None
        elif action.type is not None and isinstance(value, str | int | float) and not isinstance(value, bool):
            try:
                value = action.type(value) if callable(action.type) else value
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                kind = getattr(action.type, "__name__", "value")
                raise DoctorError(f"{where}: {name} = {value!r}: expected a {kind}") from None
        defaults[dest] = value
    parser.set_defaults(**defaults)


def jobs(found: tuple[Path, dict[str, Any]] | None) -> list[tuple[str, list[str]]]:
    """(command, its arguments) for each `check`/`audit` entry of the config, in order."""
    if found is None:
        return []
    where, table = found
    out: list[tuple[str, list[str]]] = []
    for command in _JOBS:
        entries = table.get(command, [])
        if not isinstance(entries, list):
            raise DoctorError(f"{where}: [tool.{TABLE}] {command} is a list of tables ({{ target = ... }})")
        for entry in entries:
            out.append((command, _argv(entry, where, command)))
    return out


def _argv(entry: Any, where: Path, command: str) -> list[str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("target"), str):
        raise DoctorError(f'{where}: each [tool.{TABLE}] {command} entry needs a target = "PATH:FACTORY"')
    argv = [entry["target"]]
    for key, value in entry.items():
        if key == "target":
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, bool):
                argv += [f"--{key}"] if item else []
            else:
                argv += [f"--{key}", str(item)]
    return argv
