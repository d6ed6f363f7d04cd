"""Positions page, section 3: RoPE stated with its sources (RoFormer, LLaMA) with any model, and, with a
Llama-layout checkpoint open, named as that model's own scheme with its config's rope_theta."""

from __future__ import annotations

from tests.app.conftest import app_at, assert_ok
from tests.app.folder_models import folder_models, models_dir  # noqa: F401
from ui.shell import models as M

SOURCES = ("Su et al., 2021", "Touvron et al., 2023")


def prose(at) -> str:
    return " ".join(m.value for m in at.markdown)


def test_sources_with_a_toy_model_point_to_a_llama_folder():
    at = app_at("pages/positions.py", {"model": "induction-sinusoidal"})
    assert_ok(at)
    text = prose(at)
    assert all(s in text for s in SOURCES)
    assert "Open a Llama-layout checkpoint folder in the sidebar" in text
    assert "rope_theta`, the LLaMA family's name" not in text


def test_llama_folder_is_named_as_the_scheme_its_config_sets(folder_models):
    at = app_at("pages/positions.py", {"model": folder_models["llama"]})
    assert_ok(at)
    text = prose(at)
    assert all(s in text for s in SOURCES)
    assert "The sidebar's model, tiny-llama, is one" in text
    base = M.get_model(folder_models["llama"])[0].cfg.rope_base
    assert f"base b = **{base:,g}** (read from its config: `rope_theta`, the LLaMA family's name for it)" in text
    assert "Open a Llama-layout checkpoint folder" not in text
