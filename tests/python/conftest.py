"""pytest setup: the package under test is the one built in BUILD/python
(PYTHONPATH, set by ctest), numpy always, torch where the interpreter has it."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)
