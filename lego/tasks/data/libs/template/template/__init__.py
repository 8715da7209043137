"""A tiny template engine: ``{{ expr|filter }}``, ``{% if %}``, ``{% for %}``, ``{# comments #}``."""

from template.engine import Template, TemplateSyntaxError, render
from template.filters import FILTERS, TemplateRuntimeError

__all__ = ["FILTERS", "Template", "TemplateRuntimeError", "TemplateSyntaxError", "render"]
