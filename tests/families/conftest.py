"""Each tested family (lego.models.families) as a fixture; skipped, naming the fetch script, when
its real tokenizer is not in the cache."""

from __future__ import annotations

import pytest

from lego.errors import ModelError
from lego.models.families import FAMILIES, Family


def require(f: Family) -> Family:
    try:
        f.tokenizer_dir()
        f.template()
    except ModelError as exc:
        pytest.skip(str(exc))
    return f


@pytest.fixture(params=FAMILIES, ids=[f.name for f in FAMILIES])
def family(request: pytest.FixtureRequest) -> Family:
    return require(request.param)
