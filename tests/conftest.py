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
