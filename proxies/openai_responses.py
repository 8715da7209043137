"""OpenAI Responses: request schema, conversion of input items to canonical messages, responses
and SSE.

Input items: ``message`` items (roles user/system/developer/assistant), ``function_call`` items,
``function_call_output`` items and ``reasoning`` items. Consecutive assistant-side items
(reasoning, assistant message, function calls) are merged into one canonical assistant message,
since that is how one turn of ours comes back. A key of an item or content part that is not
converted is a 400 naming its path (``input[4].foo``) unless it is null or empty or one of the
echoes of :data:`~lego.proxies.responses_request.INERT_FIELDS` (item ``id`` and ``status``, ...).
``previous_response_id`` is resolved from the responses this proxy served (the caller passes the
stored history in).

Streaming: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its deltas (``response.reasoning_text.delta``;
``response.content_part.added`` / ``response.output_text.delta`` / ``.done`` /
``response.content_part.done``; ``response.function_call_arguments.delta`` / ``.done``),
``response.output_item.done``; finally ``response.completed``. Every event has a
``sequence_number``.
"""

from __future__ import annotations

# The request side and the reply side are separate modules; this one is the API's face, the
# names the routes use.
from lego.proxies.responses_output import in_progress, responses_response, responses_stream
from lego.proxies.responses_request import ResponsesRequest, to_chat_request

__all__ = ["ResponsesRequest", "in_progress", "responses_response", "responses_stream", "to_chat_request"]
