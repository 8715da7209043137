"""Models: the chat format (messages <-> token ids), tool-call parsers, and the embedded default.

- ``lego.models.chat.ChatFormat``: render messages + tools with the model's own chat template,
  parse generated ids back into content, reasoning and tool calls.
- ``lego.models.tiny``: ``build_tiny`` (the seeded tiny Qwen3-architecture policy) and
  ``resolve_model`` (the one place that decides what a model name such as "default" means).

Submodules are imported explicitly (``from lego.models.chat import ChatFormat``) so importing this
package stays cheap.
"""
