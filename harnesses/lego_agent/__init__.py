"""The built-in reference agent: one stdlib-only file (``agent.py``) run as its own process."""

from pathlib import Path

__all__ = ["AGENT_FILE"]

AGENT_FILE = Path(__file__).with_name("agent.py")
"""The self-contained agent script the adapter hands to the sandbox's interpreter."""
