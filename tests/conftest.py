"""Shared fixtures: the real data sets in ../shared/data, next to the repository.

Tests that need them skip with the reason where the folder is absent, except under CI (CI=true),
where its absence fails the run at once: CI must run every test.
"""

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).parents[1] / ".." / "shared" / "data"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("CI") == "true" and not SHARED_DATA.is_dir():
        raise pytest.UsageError(f"CI=true, but the shared data sets are missing at {SHARED_DATA.resolve()}: "
                                "the tests that read them would only skip")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Gives the shared data folder; skips the test when it is absent (outside CI)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data sets at {SHARED_DATA.resolve()} (absent here)")
    return SHARED_DATA
