#!/usr/bin/env bash
# Install what the real-browser test (tests/browser/) needs: Debian's Chromium and
# the Playwright Python package, which drives that system browser
# (Playwright's own browser download is not used).
# Idempotent: skips what is already installed.
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
fi
if ! python -c "import playwright" >/dev/null 2>&1; then
    python -m pip install -q "playwright>=1.40"
fi
chromium --version
python -c "import playwright; from importlib.metadata import version; print('playwright', version('playwright'))"
