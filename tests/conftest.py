import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

TEST_TIMEOUT_S = 300  # a hang fails fast instead of eating CI's time


@pytest.fixture(autouse=True)
def _fail_on_hang():
    """Abort any test that runs longer than TEST_TIMEOUT_S (POSIX alarm; no-op elsewhere)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hung(signum, frame):
        raise TimeoutError(f"test exceeded {TEST_TIMEOUT_S} s: treated as a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(TEST_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
