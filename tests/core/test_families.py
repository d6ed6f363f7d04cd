"""Every bundled model belongs to a named family, and each family says what it suits."""

from __future__ import annotations

import typing

import pytest

from core.checkpoints import read_manifest
from core.config import Arch
from core.families import FAMILIES, family_label, family_of


def test_every_arch_has_exactly_one_family():
    assert set(FAMILIES) == set(typing.get_args(Arch))


def test_every_bundled_model_is_in_a_family_and_each_family_has_a_model():
    archs = {entry["arch"] for entry in read_manifest()}
    assert archs == set(FAMILIES)  # the bundled models cover the three families


def test_labels_name_the_family_and_its_famous_member():
    assert family_label("encoder") == "encoder-only, BERT-like"
    assert family_label("decoder") == "decoder-only, GPT-like"
    assert family_label("encoder-decoder") == "encoder-decoder, T5-like"
    with pytest.raises(ValueError, match="arch must be one of"):
        family_of("gpt")
