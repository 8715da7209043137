"""Drive the OpenHands SDK on one task: run inside the sandbox with the OpenHands venv's Python.

Self-contained on purpose (the sandbox has the OpenHands venv, not lego). It builds the SDK's own
``Agent`` with its terminal and file-editor tools (plus the built-in finish tool), points its
litellm-backed ``LLM`` at the proxy session (``openai/<model>`` with ``base_url``), sends the
problem statement and runs the conversation until the agent finishes or the iteration limit.
Exit codes: 0 finished, 10 iteration limit or stuck, 1 error.
"""

from __future__ import annotations

import argparse
import os
import sys

from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.sdk.conversation.state import ConversationExecutionStatus
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.terminal import TerminalTool
from pydantic import SecretStr


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--problem", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--max-iterations", type=int, default=30)
    p.add_argument("--persistence-dir", default=None)
    args = p.parse_args()
    llm = LLM(
        model=f"openai/{args.model}",
        base_url=args.base_url,
        api_key=SecretStr(os.environ.get("LLM_API_KEY", "lego-local")),
        usage_id="agent",
        num_retries=2,
    )
    agent = Agent(llm=llm, tools=[Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name)])
    conversation = Conversation(
        agent=agent,
        workspace=args.repo,
        max_iteration_per_run=args.max_iterations,
        persistence_dir=args.persistence_dir,
        visualizer=None,
    )
    conversation.send_message(args.problem)
    conversation.run()
    status = conversation.state.execution_status
    print(f"openhands_status={status.value}", flush=True)
    if status == ConversationExecutionStatus.FINISHED:
        return 0
    return 1 if status == ConversationExecutionStatus.ERROR else 10


if __name__ == "__main__":
    sys.exit(main())
