"""lego: harness-native reinforcement learning for coding agents.

The kernel (`lego.types`, `lego.config`, `lego.errors`, `lego.models`, `lego.engines`) is what the
`proxies`, `harnesses` and `sandboxes` packages import; `lego.conductor.rollout`, `lego.conductor.loop`, `eval` and
`lego.conductor.cli` compose them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
