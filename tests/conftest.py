"""Shared fixtures: the real data sets in ../shared/data, next to the repository."""

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).parents[1] / ".." / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Gives the shared data folder; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data sets at {SHARED_DATA.resolve()} (absent here)")
    return SHARED_DATA
