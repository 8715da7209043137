"""The base of every config section: unknown keys are errors, and so is assigning an invalid value."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
