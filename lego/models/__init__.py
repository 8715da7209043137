"""Models: the chat format (messages <-> token ids), tool-call parsers, and the embedded default.

- ``lego.models.chat.ChatFormat``: render messages + tools with the model's own chat template,
  parse generated ids back into content, reasoning and tool calls.
- ``lego.models.tool_parsers``: one parser per tool-call format (hermes, qwen3_coder, llama3_json,
  harmony, deepseek_v3, mistral, glm), picked from the template or by name.
- ``lego.models.tiny``: ``build_tiny`` (the seeded tiny Qwen3-architecture policy),
  ``build_tiny_on`` (a random tiny model of any family on a real tokenizer) and ``resolve_model``
  (the one place that decides what a model name such as "default" means).
- ``lego.models.families``: the families lego is tested on (tokenizer, template, formats).
- ``lego.models.check`` / ``lego.models.gguf_import``: ``lego models check`` and ``lego models import``.

Submodules are imported explicitly (``from lego.models.chat import ChatFormat``) so importing this
package stays cheap.
"""
