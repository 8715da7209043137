"""What each adapter writes: the exact environment, config files and argv that point its harness at
the proxy session (no harness process is started here)."""

from __future__ import annotations

import inspect
import json
import tomllib

import pytest

from lego.config import HARNESS_OPTIONS, LegoConfig
from lego.errors import ConfigError
from lego.harnesses.aider import AiderHarness
from lego.harnesses.base import HARNESSES, get_harness, result_from_exec
from lego.harnesses.claude_code import ClaudeCodeHarness
from lego.harnesses.codex import KEY_VAR, CodexHarness
from lego.harnesses.gemini_cli import GeminiCliHarness
from lego.harnesses.install import InstallSpec
from lego.harnesses.mini_swe_agent import MiniSweAgentHarness
from lego.harnesses.opencode import OpenCodeHarness
from lego.harnesses.openhands import OpenHandsHarness
from lego.harnesses.qwen_code import QwenCodeHarness
from lego.seams import Harness
from lego.types import Endpoint, ExecResult, HarnessLimits, Task

EP = Endpoint(
    base_url="http://127.0.0.1:18080/s/abc/v1",
    anthropic_base_url="http://127.0.0.1:18080/s/abc",
    api_key="k-1",
    model="pol",
    session_id="abc",
)
HOME = "/home/agent"
TASK = Task(instance_id="t1", repo="r", problem_statement="Fix the bug.", patch="")


def test_registry_has_every_harness_and_each_meets_the_protocol() -> None:
    names = [
        "aider",
        "claude-code",
        "codex",
        "gemini-cli",
        "lego-agent",
        "mini-swe-agent",
        "opencode",
        "openhands",
        "qwen-code",
    ]
    assert HARNESSES.names() == names
    for name in names:
        harness = get_harness(name)
        assert isinstance(harness, Harness) and harness.name == name


def test_unknown_harness_lists_the_valid_names() -> None:
    with pytest.raises(ConfigError, match="valid names: aider, claude-code"):
        get_harness("nope")


def test_harness_options_reach_the_constructor_and_bad_ones_name_the_valid_ones() -> None:
    opencode = get_harness("opencode", max_output_tokens=99)
    assert isinstance(opencode, OpenCodeHarness) and opencode.max_output_tokens == 99
    with pytest.raises(ConfigError, match="valid options: python, temperature, max_tokens"):
        get_harness("lego-agent", temprature=0.5)


def test_pinned_specs_install_under_the_data_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LEGO_DATA_DIR", str(tmp_path))
    for name in ("aider", "claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "openhands", "qwen-code"):
        spec = HARNESSES.resolve(name).install_spec
        assert isinstance(spec, InstallSpec) and spec.version and "^" not in spec.version
        assert spec.executable_path(name).is_relative_to(tmp_path / "harnesses" / name)


def test_mini_swe_agent_config_and_env() -> None:
    h = MiniSweAgentHarness()
    assert h.config(EP, HarnessLimits(max_turns=7)) == {
        "agent": {"step_limit": 7, "cost_limit": 0, "mode": "yolo", "confirm_exit": False},
        "model": {
            "model_name": "openai/pol",
            "cost_tracking": "ignore_errors",
            "model_kwargs": {"api_base": EP.base_url, "api_key": "k-1"},
        },
        "environment": {"timeout": 60},
    }
    env = h.environment(EP, HOME)
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["MSWEA_CONFIGURED"] == "true"


def test_mini_swe_agent_takes_a_message_as_a_paste_at_its_prompt_and_needs_a_live_sandbox() -> None:
    from lego.errors import HarnessError
    from lego.harnesses.mini_swe_agent import typed_message
    from lego.seams import Conversing, PreparedRun

    h = MiniSweAgentHarness()
    assert isinstance(h, Conversing) and not isinstance(get_harness("aider"), Conversing)
    # multi-line mode, one bracketed paste, Esc-Enter; no byte of the text can end the paste or act as a key
    assert typed_message("a\tb\r\nc \x1b[201~\x03\x9bd") == b"/m\r\x1b[200~a    b\nc [201~d\x1b[201~\x1b\r"
    with pytest.raises(HarnessError, match="empty message"):
        typed_message(" \x1b\n")

    class NoLiveCommands:  # a backend without LiveSandbox.start (docker)
        root, repo_dir, proxy_port, history_strip = None, "/repo", None, False

    prepared = PreparedRun(endpoint=EP, home=HOME, files={"config": "c", "trajectory": "t"})
    with pytest.raises(HarnessError, match="NoLiveCommands"):
        h.converse(TASK, NoLiveCommands(), prepared, HarnessLimits())  # type: ignore[arg-type]
    assert not h.waiting(prepared) and h.reply(NoLiveCommands(), prepared, HarnessLimits(), "hi") is None  # type: ignore[arg-type]
    h.end(NoLiveCommands(), prepared)  # type: ignore[arg-type]


def test_aider_points_litellm_at_the_session_and_turns_off_side_traffic() -> None:
    h = AiderHarness()
    args = h.arguments(TASK, EP)
    assert args[args.index("--model") + 1] == "openai/pol"
    assert args[args.index("--openai-api-base") + 1] == EP.base_url
    for flag in ("--yes-always", "--no-check-update", "--no-analytics", "--no-auto-commits", "--no-detect-urls"):
        assert flag in args
    assert args[-2:] == ["--message", "Fix the bug."]
    assert h.environment(EP, HOME)["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_opencode_config_content() -> None:
    h = OpenCodeHarness(context_window=1000, max_output_tokens=100)
    env = h.environment(EP, HOME, max_turns=9)
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "lego": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "lego proxy",
                "options": {"baseURL": EP.base_url, "apiKey": "k-1"},
                "models": {"pol": {"name": "pol", "tool_call": True, "limit": {"context": 1000, "output": 100}}},
            }
        },
        "model": "lego/pol",
        "small_model": "lego/pol",
        "enabled_providers": ["lego"],
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "agent": {"build": {"steps": 9}},
    }
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "true" and env["OPENCODE_DISABLE_AUTOUPDATE"] == "true"


def test_claude_code_env_and_args() -> None:
    h = ClaudeCodeHarness()
    env = h.environment(EP, HOME)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:18080/s/abc"
    assert env["ANTHROPIC_API_KEY"] == "k-1" and env["CLAUDE_CONFIG_DIR"] == f"{HOME}/.claude"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert {env[k] for k in env if k.endswith("_MODEL")} == {"pol"}
    args = h.arguments(TASK, EP, max_turns=5)
    assert args[:2] == ["-p", "Fix the bug."] and args[-2:] == ["--max-turns", "5"]
    assert {"--dangerously-skip-permissions", "stream-json", "--verbose"} <= set(args)


def test_codex_config_toml() -> None:
    h = CodexHarness(context_window=2000)
    cfg = tomllib.loads(h.config_toml(EP))
    assert cfg["model"] == "pol" and cfg["model_provider"] == "lego"
    assert cfg["approval_policy"] == "never" and cfg["sandbox_mode"] == "danger-full-access"
    assert cfg["model_providers"]["lego"] == {
        "name": "lego proxy",
        "base_url": EP.base_url,
        "env_key": KEY_VAR,
        "wire_api": "responses",
        "request_max_retries": 2,
        "stream_max_retries": 2,
    }
    env = h.environment(EP, HOME)
    assert env[KEY_VAR] == "k-1" and env["CODEX_HOME"] == f"{HOME}/.codex"


def test_qwen_code_env_settings_and_args() -> None:
    h = QwenCodeHarness()
    env = h.environment(EP, HOME)
    assert env["OPENAI_BASE_URL"] == EP.base_url and env["OPENAI_API_KEY"] == "k-1" and env["OPENAI_MODEL"] == "pol"
    assert env["QWEN_HOME"] == f"{HOME}/.qwen" and env["QWEN_TELEMETRY_ENABLED"] == "false"
    settings = h.settings(EP)
    assert settings["security"]["auth"]["selectedType"] == "openai" and settings["model"]["name"] == "pol"
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    args = h.arguments(TASK, EP, max_turns=6)
    assert args[-2:] == ["--prompt", "Fix the bug."] and {"--yolo", "openai"} <= set(args)
    assert args[args.index("--max-session-turns") + 1] == "6"
    assert result_from_exec(ExecResult(exit_code=53), {53: "max_turns"}).reason == "max_turns"


def test_gemini_cli_env_settings_and_args() -> None:
    h = GeminiCliHarness()
    env = h.environment(EP, HOME)
    # the Gemini client appends /v1beta/models/...: the session's root, like Anthropic's
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:18080/s/abc" and env["GEMINI_API_KEY"] == "k-1"
    assert env["GEMINI_CLI_HOME"] == HOME and env["GEMINI_TELEMETRY_ENABLED"] == "false"
    settings = h.settings(EP, max_turns=4)
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["model"] == {"name": "pol", "maxSessionTurns": 4}
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    args = h.arguments(TASK, EP)
    assert args[-2:] == ["--prompt", "Fix the bug."] and "--yolo" in args


def test_openhands_env_and_binds() -> None:
    h = OpenHandsHarness()
    assert h.environment(EP, HOME)["LLM_API_KEY"] == "k-1"
    binds = [str(p) for p in h.ro_binds()]
    assert binds[0].endswith("lego/harnesses/openhands") and binds[1] == "/root/.pyenv/versions/3.12.1"


def test_exit_mapping() -> None:
    ok = ExecResult(exit_code=0, stdout="done")
    assert result_from_exec(ok).reason == "completed"
    crash = ExecResult(exit_code=3, stderr="Traceback: boom")
    res = result_from_exec(crash)
    assert res.reason == "harness_error" and "Traceback: boom" in res.logs
    hung = ExecResult(exit_code=-9, timed_out=True)
    assert result_from_exec(hung).reason == "timeout" and result_from_exec(hung).exit_code is None
    assert result_from_exec(ExecResult(exit_code=10), {10: "max_turns"}).reason == "max_turns"


def test_typed_options_match_every_adapter_constructor() -> None:
    """harness.options.<name> is validated against HARNESS_OPTIONS at config load; the adapter is built
    from it, so each model must name exactly its adapter's constructor parameters, with the same defaults."""
    assert sorted(HARNESS_OPTIONS) == HARNESSES.names()
    for name, model in HARNESS_OPTIONS.items():
        params = {
            p.name: p.default
            for p in inspect.signature(HARNESSES.resolve(name)).parameters.values()
            if p.name != "self"
        }
        assert params == model().model_dump(), name
        harness = get_harness(name, **LegoConfig().harness.options_for(name))
        assert harness.name == name and isinstance(harness.ro_binds(), list) and harness.min_memory_mb >= 0
