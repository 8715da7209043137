"""SWE tasks: the built-in suite (libraries + bug injector), task sources and validation."""

from lego.tasks.sources import BuiltinSource, JsonlSource, load_source, require_repo

__all__ = ["BuiltinSource", "JsonlSource", "load_source", "require_repo"]
