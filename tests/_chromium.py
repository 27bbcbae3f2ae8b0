"""Drive headless Chromium from tests: dump a page's DOM, take a screenshot, collect console messages.

Reusable by any test that renders HTML. Every call starts a fresh browser with an empty profile and the network-free
flags below; nothing is kept between calls. Tests skip (with the reason) when no Chromium is found: see
`require_chromium()`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ('FLAGS', 'console_errors', 'dump_dom', 'find_chromium', 'require_chromium', 'screenshot')

FLAGS: tuple[str, ...] = (
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-dev-shm-usage',
    '--disable-extensions',
    '--mute-audio',
)
TIMEOUT = 60.0
_CANDIDATES = ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable')
_CONSOLE_RE = re.compile(r':CONSOLE[:(]\d*\)?\]\s*(.*)$')


def find_chromium() -> str | None:
    """Path of a Chromium binary: `$CHROMIUM`, then `/usr/bin/chromium`, then `chromium`/`google-chrome` on PATH."""
    env = os.environ.get('CHROMIUM')
    if env and Path(env).is_file():
        return env
    if Path('/usr/bin/chromium').is_file():
        return '/usr/bin/chromium'
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """The Chromium path, or skip the calling test with the reason."""
    path = find_chromium()
    if path is None:
        pytest.skip('headless Chromium not found (install Debian `chromium` at /usr/bin/chromium or set $CHROMIUM)')
    return path


def _run(html_path: Path, *args: str, logging: bool = False) -> subprocess.CompletedProcess[str]:
    chromium = require_chromium()
    with tempfile.TemporaryDirectory(prefix='chromium-profile-') as profile:
        cmd = [chromium, *FLAGS, f'--user-data-dir={profile}']
        if logging:
            cmd += ['--enable-logging=stderr', '--v=0']
        cmd += [*args, Path(html_path).resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def dump_dom(html_path: Path | str) -> str:
    """The DOM after the page loaded and its scripts ran (`--dump-dom`)."""
    proc = _run(Path(html_path), '--dump-dom', '--virtual-time-budget=2000')
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f'chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-2000:]}')
    return proc.stdout


def screenshot(html_path: Path | str, png_path: Path | str, *, width: int = 900, height: int = 640) -> Path:
    """Render the page to a PNG (`--screenshot`) and return its path."""
    png = Path(png_path).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    proc = _run(
        Path(html_path),
        f'--screenshot={png}',
        f'--window-size={width},{height}',
        '--hide-scrollbars',
        '--force-device-scale-factor=1',
        '--virtual-time-budget=2000',
    )
    if not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f'chromium --screenshot wrote no file ({proc.returncode}): {proc.stderr[-2000:]}')
    return png


def console_errors(html_path: Path | str) -> list[str]:
    """Console messages the page produced while loading (uncaught errors, CSP violations, failed loads, logs).

    Chromium logs every console message as `INFO:CONSOLE` whatever its level, so all of them are returned: a rendered
    answer has no scripts and loads nothing, so any message at all is a problem.
    """
    proc = _run(Path(html_path), '--dump-dom', '--virtual-time-budget=2000', logging=True)
    messages: list[str] = []
    for line in proc.stderr.splitlines():
        match = _CONSOLE_RE.search(line)
        if match:
            messages.append(match.group(1))
        elif 'Uncaught' in line or 'Refused to' in line:
            messages.append(line.strip())
    return messages
