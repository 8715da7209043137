"""Learning from use, the foundation (issue 30): a person's own sessions, recorded durably, privately, redacted.

`lego serve` puts the recording proxy in front of a person's own harnesses; each completed turn
(the request's messages, the reply, the engine prompt's and the sampled ids with their logprobs)
is redacted and written to a store before the reply is returned; feedback is kept beside it.
A judge scores each turn from what followed it; the training from those verdicts builds on this room.

    records.py    TurnRecord (+ TokenRecord), Feedback, SessionRow: what is written and read back
    store.py      TurnStore (the seam) and SqliteStore: WAL, one transaction per turn, private
                  sessions never written, iter_turns for training, purge and retention
    redact.py     Redactor: API keys, tokens, private keys, secret KEY=value, literals -> [REDACTED:<kind>]
    recorder.py   LearnRecorder: the proxy's turn sink -- opt-in and privacy, redaction (a turn whose
                  ids would hold a secret is kept without ids), the write off the event loop
    server.py     LearnServer (what `lego serve` runs) and ControlClient (`lego serve session ...`)
    signals.py    NextState: what followed each turn (tool results, the person's next message, feedback, end tests)
    tool_output.py  exit codes, pytest / unittest runs and tracebacks as the harnesses print them
    judge.py      RuleJudge, ModelJudge (any OpenAI-compatible URL), judge_store: verdicts kept beside their turns

Imports: the kernel, and the proxies' face (``lego.proxies.turns`` for the record the proxy hands
over, ``lego.proxies.server`` for the server it runs) -- `lego serve` *is* a proxy with a store;
nothing below the conductor imports this room (import contracts in pyproject.toml).
"""
