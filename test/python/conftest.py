import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded from the test name (parameters included): fixed data per parametrization."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
