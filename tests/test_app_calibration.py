"""The app's sidebar takes a calibration file (pase calibrate's) and says where its figures come from."""

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
H200_FILE = ROOT / "pase" / "hardware" / "data" / "dgx-h200.json"


def shown(text: str) -> str:
    """Markdown as the reader sees it: the app escapes file-given text with backslashes."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def test_an_uploaded_calibration_prices_the_problem_and_is_named_with_its_source():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception
    at.file_uploader(key="in_calibration").upload("my-gpu.json", H200_FILE.read_bytes(), "application/json").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cluster = at.session_state["_problem"].cluster
    # The default preset is dgx-h100: its topology kept, the H200 file's device taken.
    assert cluster.name == "dgx-h100" and cluster.memory_bytes == 141e9
    assert cluster.efficiency.memory_Bps > 4e12
    captions = shown(" ".join(c.value for c in at.sidebar.caption))
    assert "my-gpu.json" in captions and "measured on NVIDIA H200" in captions, captions


def test_a_bad_calibration_upload_is_one_error_and_the_app_keeps_working():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.file_uploader(key="in_calibration").upload("bad.json", b'{"schema": "pase-calibration", "schema_version": 9}',
                                                   "application/json").run()
    assert not at.exception
    errors = [shown(e.value) for e in at.sidebar.error]
    assert len(errors) == 1 and "schema_version" in errors[0], errors
    assert at.session_state["_problem"].cluster.efficiency is not None  # the preset's calibration still prices it
