"""The device helper picks CUDA, then MPS, else the CPU; an unknown device name is an error."""

import pytest
import torch

from core import device


def test_cpu_only_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert device.available_devices() == ["cpu"]
    assert device.pick_device().type == "cpu"
    assert device.pick_device("cuda").type == "cpu"  # asked for, not there: fall back


def test_cuda_is_preferred_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert device.available_devices() == ["cuda", "cpu"]
    assert device.pick_device().type == "cuda"
    assert device.pick_device("cpu").type == "cpu"


def test_unknown_device_name_is_refused():
    with pytest.raises(ValueError, match="device must be"):
        device.pick_device("tpu")


def test_one_thread_sets_one_and_restores_the_callers_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with device.one_thread():
            assert torch.get_num_threads() == 1
            with device.one_thread():  # nested use (a page calling an analysis) keeps one thread
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError):
            with device.one_thread():
                raise RuntimeError("boom")
        assert torch.get_num_threads() == 2  # restored on an error too
    finally:
        torch.set_num_threads(before)
