"""Fixtures for the compiler tests (helpers live in compiler_helpers.py)."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
