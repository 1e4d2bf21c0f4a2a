"""pytest setup: the package under test is the one built in BUILD/python
(PYTHONPATH, set by ctest), numpy always, torch where the interpreter has it."""
import threading
import time

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def ticks_during(work):
    """(ticks of a thread sleeping 1 ms at a time while work() ran, seconds
    work() took): how the GIL-release tests see whether another Python thread
    could run during ffn's calls."""
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    start = time.perf_counter()
    work()
    end = time.perf_counter()
    done.set()
    t.join()
    return len([s for s in ticks if start < s < end]), end - start
