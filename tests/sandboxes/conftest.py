"""Fixture tasks for sandbox / grading tests: a real git repo holding a tiny buggy library."""

from __future__ import annotations

import pytest
from sbx_fixtures import make_task

from lego.types import Task


@pytest.fixture(scope="session")
def calc_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("tasks"))
