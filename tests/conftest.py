import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

TEST_TIMEOUT_S = 300  # a hang fails fast instead of eating CI's time
PACKAGE = Path(__file__).resolve().parent.parent / "simtrain"


def pytest_configure(config):
    """Compile the package's bytecode once, before any test starts a process. The suite starts
    dozens of Python processes (the command line, the benchmarks' scenarios, the notebooks, the
    searches' workers); where ``PYTHONDONTWRITEBYTECODE`` is set, each would compile every module
    of the package again (about 0.3 s a process on a 2-core machine). Python reads bytecode
    whatever that variable says; an xdist worker leaves it to the controller."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    compileall.compile_dir(str(PACKAGE), quiet=2)


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
