"""ui.allocator: the server caps glibc's malloc arenas once per process (memory back near its baseline
after a class leaves); elsewhere it does nothing and says so."""

from __future__ import annotations

import platform

import pytest

from ui import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")
def test_glibc_accepts_the_cap_and_a_second_call_keeps_the_first_answer():
    assert allocator.cap_arenas() is True
    assert allocator.cap_arenas(64) is True  # once per process: not set again
    assert allocator._DONE == [True]


def test_without_a_c_library_it_refuses_quietly(monkeypatch):
    monkeypatch.setattr(allocator, "_DONE", [])

    def missing(*args, **kwargs):
        raise OSError("no C library here")

    monkeypatch.setattr(allocator.ctypes, "CDLL", missing)
    assert allocator.cap_arenas() is False
    assert allocator._DONE == [False]
