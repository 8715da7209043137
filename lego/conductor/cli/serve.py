"""`lego serve` (the recording endpoint for your own harnesses, its sessions, export and purge) and `lego feedback`.

The command parses, builds and prints; what it runs is :mod:`lego.learn` (the server, the store,
redaction).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lego.conductor.cli.basic import flag_overrides, override_option

if TYPE_CHECKING:
    from lego.config import LegoConfig

__all__ = ["feedback", "serve_group"]


def _config(config: str | None, overrides: tuple[str, ...], flags: dict[str, Any] | None = None) -> LegoConfig:
    from lego.config import load_config
    from lego.errors import ConfigError

    try:
        return load_config(config, [*overrides, *flag_overrides(flags or {})])
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


_config_option = click.option(
    "--config", "config", type=click.Path(exists=True, dir_okay=False), default=None, help="A lego config file."
)
_dir_option = click.option(
    "--dir", "directory", default=None, help="serve.dir: the serve directory (default: <data dir>/serve)."
)


@click.group("serve", invoke_without_command=True)
@_config_option
@override_option("-o serve.port=8300 -o serve.retention_days=7")
@_dir_option
@click.option("--model", default=None, help="Shortcut for engine.model: an HF model directory, or 'default'.")
@click.option("--engine", "engine_kind", type=click.Choice(["transformers", "vllm"]), default=None, help="engine.kind")
@click.option("--vllm-url", default=None, help="engine.vllm_url: base URL of `vllm serve` (with --engine vllm).")
@click.option("--host", default=None, help="serve.host: the model face's address (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="serve.port (default 8200; 0: a free one).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="engine.device")
@click.option("--learn", is_flag=True, default=None, help="serve.learn: train on the judged turns while serving.")
@click.option(
    "--rollback",
    type=click.IntRange(0),
    default=None,
    help="With --learn: serve learner step N's weights again (0: the starting ones); later steps are set aside.",
)
@click.pass_context
def serve_group(
    ctx: click.Context,
    config: str | None,
    overrides: tuple[str, ...],
    directory: str | None,
    model: str | None,
    engine_kind: str | None,
    vllm_url: str | None,
    host: str | None,
    port: int | None,
    device: str | None,
    learn: bool | None,
    rollback: int | None,
) -> None:
    """Serve the policy to your own harnesses and record the sessions you opt in, to learn from use.

    \b
    lego serve --model PATH                 start the endpoint (Ctrl-C stops it)
    eval "$(lego serve session new)"        open a recorded session: exports OPENAI_/ANTHROPIC_ BASE_URL and API_KEY
    lego serve session new --private        served, never written (only counted)
    lego feedback SESSION [TURN] +1|-1 [TEXT]
    lego serve judge [--judge model]        score every settled turn from what followed it
    lego serve turns SESSION                each turn, what followed it, its verdicts
    lego serve export OUT.jsonl             every recorded turn with its feedback and verdicts
    lego serve purge --session S | --all    delete what was recorded

    Point any harness at the session's base URL with the session's key as its API key: every
    completed turn (messages, reply, the token ids and logprobs) is redacted (API keys, tokens,
    private keys, secret KEY=value lines, the key itself) and committed to <dir>/learn.db before
    the reply is returned. A turn whose token ids would hold a secret is kept without them.
    Nothing leaves the machine; turns older than serve.retention_days are deleted.

    \b
    lego serve --model PATH --learn         also train while serving: each pass judges what settled,
                                            trains a step on serve.learn_batch scored turns, swaps the
                                            weights in between requests, checkpoints <dir>/learner
    lego serve --model PATH --learn --rollback 3    serve step 3's weights again and go on from there
    """
    ctx.ensure_object(dict)
    ctx.obj["config"] = (config, overrides, {"serve.dir": directory})
    if ctx.invoked_subcommand is not None:
        return
    flags = {
        "serve.dir": directory,
        "engine.model": model,
        "engine.kind": engine_kind,
        "engine.vllm_url": vllm_url,
        "engine.device": device,
        "serve.host": host,
        "serve.port": port,
        "serve.learn": learn,
    }
    cfg = _config(config, overrides, flags)
    if rollback is not None and not cfg.serve.learn:
        raise click.UsageError("--rollback N rolls the learner back: give --learn (serve.learn=true) with it")
    if cfg.serve.learn:
        from lego.conductor.preflight import check_serve_learn
        from lego.errors import ConfigError

        try:
            check_serve_learn(cfg)  # before the model loads
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from exc
    from lego.learn.server import LearnServer

    engine, chat_format = _load_policy(cfg)
    server = LearnServer(engine, chat_format, cfg.proxy, cfg.serve)
    running: Any = server
    if cfg.serve.learn:
        running = _start_learning(cfg, server, engine, chat_format, rollback)
    else:
        server.start()
    from lego.conductor.cli.proxy import serve_until_signalled

    serve_until_signalled(running, lambda: _banner(cfg, server))


def _load_policy(cfg: LegoConfig) -> tuple[Any, Any]:
    """The engine and chat format `lego serve` serves, once its port is known to be free (a taken port
    is one line and exit 2, before a model that takes a minute to load)."""
    from lego.conductor.cli.proxy import refuse_taken_port
    from lego.engines import build_engine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model

    refuse_taken_port(cfg.serve.host, cfg.serve.port, "--port")
    ecfg = cfg.engine
    engine = build_engine(ecfg)
    return engine, ChatFormat.from_pretrained(resolve_model(ecfg.model), ecfg.chat_template, ecfg.tool_parser)


def _banner(cfg: LegoConfig, server: Any) -> None:
    """Where `lego serve` listens (printed once Ctrl-C is handled)."""
    ecfg, days = cfg.engine, cfg.serve.retention_days
    click.echo(f"lego serve: {ecfg.model} ({ecfg.kind}); store {server.dir / 'learn.db'}")
    click.echo(f"  model face:    {server.model_url}/v1  (a session's key as the API key)")
    click.echo(f"  control face:  {server.control_uds}")
    click.echo(f"  retention:     {'until purged' if days is None else f'{days:g} days'}")
    click.echo('open a session: eval "$(lego serve session new)"   Ctrl-C to stop.')


class _LearningServer:
    """`lego serve --learn` as one thing to stop: the learner (its step in flight saved), then the server."""

    def __init__(self, server: Any, learner: Any) -> None:
        self.server, self.learner = server, learner

    def stop(self) -> None:
        self.learner.stop()
        self.server.stop()


def _start_learning(cfg: LegoConfig, server: Any, engine: Any, chat_format: Any, rollback: int | None) -> Any:
    from lego.conductor.serve_learner import ServeLearner
    from lego.errors import ConfigError

    def report(line: dict[str, Any]) -> None:
        if "learner/stopped" in line:
            click.secho(f"learner stopped: {line['learner/stopped']} (serving goes on)", fg="red", err=True)
            return
        if "heldout/pass1" in line:
            click.echo(
                f"held-out check at step {line['heldout/step']} | pass@1 {line['heldout/pass1']:.3f} | start "
                f"{line['heldout/reference']:.3f} (step {line['heldout/reference_step']}) | {line['heldout/s']:.0f}s"
            )
            return
        opd = f" | distilled {line['learner/opd_turns']:.0f}" if "learner/opd_turns" in line else ""
        pearson = line.get("training/rollout_actor_probs_pearson_corr", float("nan"))
        click.echo(
            f"learner step {line['step']} | {line['learner/turns']} turns | score {line['learner/score_mean']:+.2f} "
            f"- baseline {line['learner/baseline']:+.2f}{opd} | pearson {pearson:.5f} | "
            f"backlog {line['learner/backlog']} | {line['learner/step_s']:.1f}s"
        )

    try:
        learner = ServeLearner.build(cfg, server, engine, chat_format, on_step=report)
        step = learner.resume(rollback)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    server.start()
    learner.start()
    where = "the starting weights" if step == 0 else f"learner step {step}"
    click.echo(
        f"learning: serving {where}; a step every {cfg.serve.learn_batch} judged turns ({cfg.serve.judge} judge, "
        f"{cfg.serve.learn_baseline} baseline)"
        + (
            f"; held-out check on {cfg.serve.learn_heldout} every {cfg.serve.learn_heldout_every} steps"
            if cfg.serve.learn_heldout
            else ""
        )
    )
    return _LearningServer(server, learner)


def _serve_config(ctx: click.Context, more: dict[str, Any] | None = None) -> LegoConfig:
    config, overrides, flags = ctx.obj["config"]
    return _remembered(_config(config, overrides, {**flags, **(more or {})}))


def _remembered(cfg: LegoConfig) -> LegoConfig:
    """``cfg`` with the running `lego serve`'s directory when it names none (`lego serve --dir X` prints
    companions' commands without ``--dir``: they find X here)."""
    from lego.learn.server import remembered_dir

    running = remembered_dir() if cfg.serve.dir is None else None
    if running is None:
        return cfg
    return cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"dir": str(running)})})


@serve_group.group("session")
def session_group() -> None:
    """Open, list and end sessions of a running `lego serve`."""


@session_group.command("new")
@click.option("--private", is_flag=True, help="Serve it but never write it (only a turn count is kept).")
@click.option("--label", default="", help="A note kept with the session (not for private ones).")
@click.option("--id", "session_id", default=None, help="The session's id (default: a fresh s-XXXXXXXX).")
@click.pass_context
def session_new(ctx: click.Context, private: bool, label: str, session_id: str | None) -> None:
    """Open a session on the running server; prints `export` lines for your harness (stdout) and what it is (stderr).

    \b
    eval "$(lego serve session new)" && codex    # or claude, aider, mini, ...
    """
    from lego.learn.server import ControlClient, serve_dir

    cfg = _serve_config(ctx)
    client = ControlClient.connect(serve_dir(cfg.serve), cfg.proxy.api_key)
    try:
        opened = client.new_session(private=private, label=label, session_id=session_id)
    finally:
        client.close()
    what = "private: served, never written" if private else "recorded, redacted before writing"
    click.echo(f"session {opened.row.id} opened ({what}); its key works until lego serve stops", err=True)
    for name, value in opened.env().items():
        click.echo(f"export {name}={value}")


@session_group.command("list")
@click.pass_context
def session_list(ctx: click.Context) -> None:
    """The sessions in the store: id, private, turns, feedback, created, label."""
    from lego.learn.server import open_store

    store = open_store(_serve_config(ctx).serve)
    try:
        rows = store.sessions()
    finally:
        store.close()
    if not rows:
        click.echo("no sessions; open one with `lego serve session new`")
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at))
        kind = "private" if r.private else "recorded"
        click.echo(f"{r.id}  {kind:8}  turns {r.turns:4}  feedback {r.feedback:3}  {created}  {r.label}")


@session_group.command("end")
@click.argument("session_id")
@click.pass_context
def session_end(ctx: click.Context, session_id: str) -> None:
    """Revoke SESSION_ID's key on the running server (what it recorded stays; purge deletes it)."""
    from lego.learn.server import ControlClient, serve_dir

    cfg = _serve_config(ctx)
    client = ControlClient.connect(serve_dir(cfg.serve), cfg.proxy.api_key)
    try:
        if not client.end_session(session_id):
            raise click.ClickException(f"no open session {session_id!r} on the running server")
    finally:
        client.close()
    click.echo(f"session {session_id} ended")


@serve_group.command("judge")
@click.option(
    "--judge", "kind", type=click.Choice(["rules", "model"]), default=None, help="serve.judge (default rules)."
)
@click.option(
    "--url", default=None, help="serve.judge_url: an OpenAI-compatible /v1 (default: the policy, in-process)."
)
@click.option("--judge-model", default=None, help="serve.judge_model: the model name sent to --url.")
@click.option("--votes", type=click.IntRange(1, 32), default=None, help="serve.judge_votes (> 1 needs a temperature).")
@click.option("--session", "sessions", multiple=True, help="Only this session (repeatable).")
@click.option("--again", is_flag=True, help="Judge turns this judge judged before too (the old verdicts stay).")
@click.pass_context
def judge(
    ctx: click.Context,
    kind: str | None,
    url: str | None,
    judge_model: str | None,
    votes: int | None,
    sessions: tuple[str, ...],
    again: bool,
) -> None:
    """Score every settled turn of the recorded sessions from its next state; keep each verdict beside its turn.

    \b
    lego serve judge                               the rules: tests red -> green, failed commands, "thanks"
    lego serve judge --judge model                 the policy judges (served in-process for this run)
    lego serve judge --judge model --url http://127.0.0.1:8000/v1 --judge-model Qwen/Qwen3-8B
    lego serve turns SESSION                       read the verdicts, with what each judge saw

    A turn is judged once per judge (a rerun continues where one stopped); the thread's last turn of a
    session still open is left for later. A verdict without a score is written as such (no signal,
    or a model reply without `Score: X`), never as 0. The rubric is in `lego.learn.judge`.
    """
    from lego.errors import LegoError
    from lego.learn.judge import Judge, ModelJudge, RuleJudge, judge_store
    from lego.learn.redact import Redactor
    from lego.learn.server import open_store

    more = {"serve.judge": kind, "serve.judge_url": url, "serve.judge_model": judge_model, "serve.judge_votes": votes}
    cfg = _serve_config(ctx, more)
    sc = cfg.serve
    store = open_store(sc)
    served = None
    try:
        chosen: Judge = RuleJudge()
        if sc.judge == "model":
            judge_url = sc.judge_url
            if judge_url is None:
                served = _serve_policy_for_judging(cfg)
                judge_url = served.base_url
                click.echo(f"judging with the policy {cfg.engine.model}, served at {judge_url}", err=True)
            chosen = ModelJudge.from_config(sc, judge_url)
        try:
            report = judge_store(
                store,
                chosen,
                session_ids=list(sessions) or None,
                redactor=Redactor(sc.redact_literals),
                again=again,
                on_verdict=lambda v: click.echo(
                    f"  {v.session_id} turn {v.turn}: {v.status}"
                    + ("" if v.score is None else f" {v.score:+.2f}")
                    + (f" ({', '.join(v.rules)})" if v.rules else ""),
                    err=True,
                ),
            )
        except KeyError as exc:
            raise click.ClickException(f"{exc.args[0]}; `lego serve session list` shows them") from exc
        except LegoError as exc:
            raise click.ClickException(f"{exc} (the verdicts written so far are kept; rerun to continue)") from exc
    finally:
        store.close()
        if served is not None:
            served.stop()
    click.echo(report.line())


def _serve_policy_for_judging(cfg: LegoConfig) -> Any:
    """The policy behind an OpenAI-compatible face on a free loopback port, for one judging run."""
    from lego.engines import build_engine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model
    from lego.proxies.server import ProxyServer

    chat = ChatFormat.from_pretrained(resolve_model(cfg.engine.model), cfg.engine.chat_template, cfg.engine.tool_parser)
    proxy_cfg = cfg.proxy.model_copy(update={"host": "127.0.0.1", "port": 0, "uds": None, "strict_sessions": False})
    server = ProxyServer(build_engine(cfg.engine), chat, proxy_cfg)
    server.start()
    return server


@serve_group.command("turns")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a turn: the turn, its next state, its verdicts.")
@click.pass_context
def turns(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Each recorded turn of SESSION_ID: its reply, what followed it (results, tests, the person's
    words, feedback) and every judge's verdict -- how each reward can be audited."""
    from lego.learn.server import open_store
    from lego.learn.signals import session_signals

    store = open_store(_serve_config(ctx).serve)
    try:
        row = store.session(session_id)
        records = list(store.iter_turns(session_id=session_id))
        said = store.said(session_id)
    finally:
        store.close()
    if row is None:
        raise click.ClickException(f"no session {session_id!r} in the store; `lego serve session list` shows them")
    if row.private:
        raise click.ClickException(f"session {session_id!r} is private: its turns were never written")
    states = {s.turn: s for s in session_signals(records, ended=row.ended_at is not None, said=said)}
    for t in records:
        assert t.index is not None
        state = states[t.index]
        if as_json:
            verdicts = [v.to_json() for v in t.verdicts]
            click.echo(json.dumps({"turn": t.to_json(), "next_state": state.to_json(), "verdicts": verdicts}))
            continue
        click.echo(f"turn {t.index}  {'main' if t.main else t.thread}  {t.api}  v{t.policy_version}: {_said(t.reply)}")
        click.echo(f"    next: {_next_line(state)}")
        for v in t.verdicts:
            score = "-" if v.score is None else f"{v.score:+.2f}"
            click.echo(f"    {v.judge}: {v.status} {score}" + (f"  ({', '.join(v.rules)})" if v.rules else ""))


def _said(reply: dict[str, Any]) -> str:
    calls = [c.get("function", {}).get("name", "?") for c in reply.get("tool_calls") or []]
    text = " ".join(str(reply.get("content") or "").split())
    said = (text[:70] + "...") if len(text) > 70 else text
    return " ".join(filter(None, [said, f"[calls {', '.join(calls)}]" if calls else ""])) or "(empty)"


def _next_line(state: Any) -> str:
    parts = [state.status]
    for r in state.tool_results:
        bits = [f"exit {r.exit_code}" if r.exit_code is not None else ""]
        if r.test_run is not None:
            bits.append(r.test_run.summary)
        if r.traceback is not None:
            bits.append(r.traceback.exc_type)
        parts.append("result: " + (", ".join(b for b in bits if b) or "no exit code"))
    if state.user_message:
        parts.append(f"person: {' '.join(state.user_message.split())[:60]!r}")
    for m in state.unrecorded_user_messages:
        parts.append(f"NOT the person (never said): {' '.join(m.split())[:60]!r}")
    parts += [f"feedback {f.score:+d}" for f in state.feedback]
    if state.session_tests is not None:
        parts.append(f"end: {state.session_tests.summary}")
    return "; ".join(parts)


@serve_group.command("export")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.pass_context
def export(ctx: click.Context, out: str, session_id: str | None) -> None:
    """Write every recorded turn (redacted, with its feedback and verdicts) to OUT as JSON lines; private sessions have none."""
    from lego.io import atomic_write_text
    from lego.learn.server import open_store

    store = open_store(_serve_config(ctx).serve)
    try:
        lines = [json.dumps(t.to_json(), ensure_ascii=False) for t in store.iter_turns(session_id=session_id)]
    finally:
        store.close()
    atomic_write_text(out, "".join(line + "\n" for line in lines))
    click.echo(f"{len(lines)} turns -> {Path(out)}")


@serve_group.command("purge")
@click.option("--session", "session_id", default=None, help="Delete this session.")
@click.option("--all", "everything", is_flag=True, help="Delete every session.")
@click.option("--yes", is_flag=True, help="Do not ask (with --all).")
@click.pass_context
def purge(ctx: click.Context, session_id: str | None, everything: bool, yes: bool) -> None:
    """Delete a session's (or every session's) turns and feedback from the store, overwritten on disk."""
    from lego.learn.server import open_store

    if (session_id is None) == (not everything):
        raise click.UsageError("pass exactly one of --session S or --all")
    if everything and not yes:
        click.confirm("delete every recorded session?", abort=True)
    store = open_store(_serve_config(ctx).serve)
    try:
        n = store.purge(session_id)
    finally:
        store.close()
    if session_id is not None and n == 0:
        raise click.ClickException(f"no session {session_id!r} in the store; `lego serve session list` shows them")
    click.echo(f"purged {n} session{'s' if n != 1 else ''}")


def _parse_feedback(args: tuple[str, ...]) -> tuple[int | None, int, str]:
    """``[TURN] +1|-1 [TEXT...]`` (a score is +1, 1, -1, up or down)."""
    scores = {"+1": 1, "1": 1, "up": 1, "-1": -1, "down": -1}
    rest = list(args)
    turn: int | None = None
    if len(rest) >= 2 and rest[0].isdigit() and rest[1] in scores:
        turn = int(rest.pop(0))
    if not rest or rest[0] not in scores:
        raise click.UsageError(
            "usage: lego feedback SESSION [TURN] +1|-1 [TEXT]  (e.g. lego feedback s-1a2b 3 -1 'wrong file')"
        )
    score = scores[rest.pop(0)]
    return turn, score, " ".join(rest)


@click.command("feedback", context_settings={"ignore_unknown_options": True})
@click.argument("session_id")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@_config_option
@_dir_option
def feedback(session_id: str, args: tuple[str, ...], config: str | None, directory: str | None) -> None:
    """Keep your verdict on a turn of a recorded session: lego feedback SESSION [TURN] +1|-1 [TEXT].

    \b
    lego feedback s-1a2b +1                        the session's last turn was good
    lego feedback s-1a2b 3 -1 "edited the wrong file"

    TURN counts from 0 (`lego serve export` shows each turn's number); without it, the last turn.
    Written to the store directly (redacted), whether or not `lego serve` runs.
    """
    from lego.learn.redact import Redactor
    from lego.learn.server import open_store

    turn, score, text = _parse_feedback(args)
    cfg = _remembered(_config(config, (), {"serve.dir": directory}))
    store = open_store(cfg.serve)
    try:
        fb = store.add_feedback(session_id, turn, score, Redactor(cfg.serve.redact_literals).redact(text)[0])
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from exc
    finally:
        store.close()
    click.echo(f"feedback {fb.score:+d} on {fb.session_id} turn {fb.turn}")
