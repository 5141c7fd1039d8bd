"""Headless Chromium for the HTML tests: render a file, return its DOM text and a screenshot.

Chromium comes from Debian (scripts/install-chromium.sh); tests skip with the reason when it is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


@dataclass
class Rendered:
    dom: str
    screenshot: Path


def chromium_or_skip() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no headless browser: chromium not on PATH (run scripts/install-chromium.sh)")
    return exe


def _run(exe: str, args: list[str], profile: str) -> subprocess.CompletedProcess:
    # A fresh profile per call: a second chromium on the same profile would hand over to the first.
    env = {**os.environ, "HOME": profile}
    return subprocess.run(
        [exe, *_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


def render(html_file: Path, out_dir: Path, width: int = 1280, height: int = 2000) -> Rendered:
    exe = chromium_or_skip()
    url = html_file.resolve().as_uri()
    png = out_dir / (html_file.stem + ".png")
    with tempfile.TemporaryDirectory() as profile:
        dom = _run(exe, ["--dump-dom", url], profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    with tempfile.TemporaryDirectory() as profile:
        shot = _run(exe, [f"--screenshot={png}", f"--window-size={width},{height}", url], profile)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    return Rendered(dom=dom.stdout, screenshot=png)
