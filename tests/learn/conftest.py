"""Fixtures for the learning-from-use tests: the tiny model, scripted behind a real `lego serve` server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import ProxyConfig, ServeConfig
from lego.engines.scripted import ScriptedEngine
from lego.learn.server import ControlClient, LearnServer


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path) -> Any:
    from lego.engines.transformers_engine import TransformersEngine

    return TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=4, seed=0)


@pytest.fixture()
def served(
    tiny_engine: Any, chat_format: Any, tmp_path: Path
) -> Iterator[tuple[LearnServer, ScriptedEngine, ControlClient]]:
    """A LearnServer (model face on a free loopback port, store in tmp_path) and a client of its control face."""
    engine = ScriptedEngine(tiny_engine, chat_format)
    serve = ServeConfig(dir=str(tmp_path / "serve"), port=0)
    with LearnServer(engine, chat_format, ProxyConfig(default_max_tokens=256), serve) as server:
        client = ControlClient.connect(server.dir)
        try:
            yield server, engine, client
        finally:
            client.close()


def read_store_files(directory: Path) -> bytes:
    """Every byte of every file of the store (the database, its WAL and shared-memory index)."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("learn.db*")))


@pytest.fixture()
def store_bytes() -> Any:
    return read_store_files
