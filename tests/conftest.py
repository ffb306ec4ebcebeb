import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    # GPU tests are skipped, visibly, only where no CUDA device exists.
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """Small kernels on a shared, busy CPU: several torch threads only wait on each other
    (20x slower), so a module that asks for it runs on one (``pytestmark``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
