"""Fixtures of the real-browser tests: the app served on a loopback port, and headless Chromium.

The browser is Debian's Chromium (``/usr/bin/chromium``) driven by Playwright
(``.ci/browser-setup.sh`` installs both). Without them the tests are skipped,
except under CI (``CI`` set), where a missing browser is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("PASE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 60


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives the app in headless Chromium (tests/browser)")


def _missing_browser() -> str | None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (run .ci/browser-setup.sh)"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (run .ci/browser-setup.sh)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def chromium():
    why = _missing_browser()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run under CI: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def _serve(log_path: Path):
    """Run ``streamlit run app.py`` (the repository's .streamlit/config.toml applies) on 127.0.0.1 and a free
    port; yield its URL once it answers; stop it afterwards."""
    port = _free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         "--global.developmentMode", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not answer within {SERVER_START_TIMEOUT_S} s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The app, served for the whole session: start ``streamlit run app.py`` once; yield its URL."""
    if _missing_browser() and not os.environ.get("CI"):
        pytest.skip(_missing_browser())
    with _serve(tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture()
def fresh_app_url(tmp_path):
    """The app on a server of its own that no request has reached yet (a server's first run differs)."""
    if _missing_browser() and not os.environ.get("CI"):
        pytest.skip(_missing_browser())
    with _serve(tmp_path / "server.log") as url:
        yield url


@pytest.fixture()
def page(chromium):
    context = chromium.new_context(viewport={"width": 1500, "height": 1100})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
