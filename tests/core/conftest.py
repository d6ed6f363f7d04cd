"""Shared fixtures for the core tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Small models run fastest on one thread, and a busy shared CPU punishes oversubscription."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
