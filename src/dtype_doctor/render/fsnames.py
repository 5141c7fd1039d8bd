"""File names as they are on disk, in outputs that must be valid Unicode.

On Linux a file name is any bytes; Python decodes the ones that are not UTF-8 with surrogateescape
(b"caf\\xe9.py" is "caf\\udce9.py"), a string no UTF-8 writer accepts. A text output shows such a
byte as `\\xe9` (`shown`), a URI percent-encodes the name's bytes (`uri_path`: "caf%E9.py").
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote


def shown(text: str) -> str:
    """`text` as valid Unicode: a byte decoded by surrogateescape as `\\xNN`, another lone surrogate
    as `\\udNNN`; any other text unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown_all(value: Any) -> Any:
    """Every string of a JSON-like value (dict keys too) through `shown`."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {shown_all(k): shown_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_all(v) for v in value]
    return value


def uri_path(path: str) -> str:
    """A relative path as a URI reference: its bytes on disk percent-encoded, `/` kept."""
    return quote(os.fsencode(path))
