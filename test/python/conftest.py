import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded from the test id: every test (and parametrization) gets its own fixed data."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
