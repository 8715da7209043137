"""Wrap, fill, indent and align plain text."""

from wrap.align import center, justify, ljust_lines, rjust_lines, truncate
from wrap.core import dedent, fill, indent, wrap

__all__ = ["center", "dedent", "fill", "indent", "justify", "ljust_lines", "rjust_lines", "truncate", "wrap"]
