"""lego: harness-native reinforcement learning for coding agents.

The kernel (`lego.types`, `lego.config`, `lego.errors`, `lego.models`, `lego.engines`) is what the
`proxies`, `harnesses` and `sandboxes` packages import; `lego.rollout`, `lego.train`, `eval` and
`lego.cli` compose them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
