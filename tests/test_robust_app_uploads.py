"""The app's uploaders get the fuzzer's hostile files (``tests/fuzz_strategies.py``): every
upload ends in the page drawn or in ``st.error`` lines, never in an exception box.

The default run uploads a handful of drawn files per uploader into one running app (about
a second each); the ``slow`` run draws many more.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from solvers import filecheck  # noqa: E402
from tests import fuzz_strategies as fs  # noqa: E402
from tests.test_robust_fuzz_formats import VALID_PLAN  # noqa: E402

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
DEFAULT_EXAMPLES = 6
SLOW_EXAMPLES = int(os.environ.get("EPLB_FUZZ_APP_EXAMPLES", "150"))
# One-layer loads and all-dense files (StreamlitInvalidMinMaxError, StreamlitValueAboveMaxError
# before) are always among the uploads.
EDGE_FILES = [("one-layer.csv", b"1,2,3,4,5,6,7,8\n"), ("all-dense.csv", b"0,0,0,0\n" * 1099 + b"1,2,3,4\n")]


@pytest.fixture(autouse=True)
def _small_caps(monkeypatch):
    monkeypatch.setattr(filecheck, "BOMB_MIN_BYTES", 1 << 20)


def _settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=n == DEFAULT_EXAMPLES, database=None,
                    suppress_health_check=list(HealthCheck))


def _upload_page() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.radio(key="loads:source").set_value("Upload").run()
    return at


def _check(at: AppTest) -> None:
    assert not at.exception, [e.value[:300] for e in at.exception]
    for e in at.error:
        assert "\n" not in e.value.strip(), e.value


def _loads_uploads(n: int) -> None:
    at = _upload_page()
    for name, data in EDGE_FILES:
        at.file_uploader(key="explore:upload").set_value((name, data, "application/octet-stream")).run()
        _check(at)

    @_settings(n)
    @given(fs.loads_files)
    def upload(file):
        suffix, data = file
        at.file_uploader(key="explore:upload").set_value((f"fuzz{suffix}", data, "application/octet-stream")).run()
        _check(at)

    upload()


def _plan_uploads(n: int) -> None:
    at = _upload_page()
    at.file_uploader(key="explore:upload").set_value(("ok.csv", b"1,2,3,4\n5,6,7,8\n", "text/csv")).run()
    at.toggle(key="explore:previous_on").set_value(True).run()
    _check(at)
    plans = st.one_of(fs.sglang_plan_files(), fs.trtllm_plan_files(), fs.csv_plan_files(),
                      fs.eplb_plan_files(VALID_PLAN))

    @_settings(n)
    @given(plans)
    def upload(file):
        suffix, data = file
        at.file_uploader(key="explore:previous").set_value((f"plan{suffix}", data, "application/octet-stream")).run()
        _check(at)

    upload()


def test_hostile_loads_uploads_show_errors_not_exceptions():
    _loads_uploads(DEFAULT_EXAMPLES)


def test_hostile_plan_in_force_uploads_show_errors_not_exceptions():
    _plan_uploads(DEFAULT_EXAMPLES)


@pytest.mark.slow
def test_hostile_uploads_large_budget():
    _loads_uploads(SLOW_EXAMPLES)
    _plan_uploads(SLOW_EXAMPLES)
