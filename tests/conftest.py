"""Shared fixtures. Keep this file small and tidy: one fixture per shared real component."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default's architecture, built once per test session (seed 0, a few seconds)."""
    from lego.models.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def chat_format(tiny_model_dir: Path):  # -> lego.models.chat.ChatFormat
    """The tiny model's ChatFormat (hermes tool calls)."""
    from lego.models.chat import ChatFormat

    return ChatFormat.from_pretrained(tiny_model_dir)
