"""Headless Chromium for the report's browser check and the README screenshot.

The binary is `$MLTS_CHROMIUM` when set, else the first of the usual names on PATH (Debian's package
installs `chromium`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT_S = 120


def find_chromium() -> str | None:
    explicit = os.environ.get("MLTS_CHROMIUM")
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def run_chromium(binary: str, page: Path, *extra: str) -> subprocess.CompletedProcess:
    """One headless run on `page` with a throwaway profile (no first-run state, no shared profile lock)."""
    with tempfile.TemporaryDirectory(prefix="mlts-chromium-") as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-extensions", "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
               *extra, page.resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)


def dump_dom(binary: str, page: Path, *extra: str) -> str:
    """The DOM as Chromium built it (after parsing and layout), serialized."""
    proc = run_chromium(binary, page, "--dump-dom", *extra)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def screenshot(binary: str, page: Path, out: Path, width: int = 1280, height: int = 2400) -> Path:
    proc = run_chromium(binary, page, f"--screenshot={out.resolve()}", f"--window-size={width},{height}")
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium --screenshot failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out
