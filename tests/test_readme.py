"""The README, followed word for word: every command in its ```bash blocks runs as written (after the
set-up, which puts `lego` on PATH with `source .venv/bin/activate`) and prints what the README says.

Each command is either run here, with the output the README claims, or listed in ``NOT_RUN`` with
the reason; a command added to the README that is neither fails ``test_every_readme_command_is_accounted_for``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

NOT_RUN: dict[str, str] = {
    "bash scripts/setup.sh && .venv/bin/lego train": "the set-up itself (apt, venv, pip), then a 20-step training run",
    "source .venv/bin/activate": "the set-up: what every run below does by putting .venv/bin first on PATH",
    ".venv/bin/python -m pytest": "the whole test suite, this file included",
    "lego proxy --model PATH": "a usage synopsis with placeholders; serves until Ctrl-C (tests/proxies runs it)",
    "lego train [CONFIG.toml]": "a usage synopsis with placeholders; a full run is long (tests/lego/test_train.py)",
    "lego eval --from-run runs/default": "needs a trained run; 400 samples take tens of minutes",
    "lego eval --policy base=default": "needs runs/default's step 20 checkpoint and the third-party harnesses",
    "lego eval report runs/eval": "needs the eval directory the command above writes",
    "CUDA_VISIBLE_DEVICES=0 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve": "needs a GPU and vLLM; "
    "tests/lego/test_scaleout_recipe.py checks its flags against what lego sends and needs",
    "CUDA_VISIBLE_DEVICES=0 VLLM_SERVER_DEV_MODE=1 vllm serve": "needs a GPU and vLLM (flags checked as above)",
    "cp -r /models/Qwen3-8B": "copies the user's checkpoint, a placeholder path",
    "CUDA_VISIBLE_DEVICES=1 lego train lego/configs/vllm-qwen3.toml": "needs the vLLM server above; "
    "tests/lego/test_scaleout_recipe.py runs it against a vLLM stand-in, and without a server",
    "torchrun --standalone --nproc-per-node 2 -m lego train": "three steps of the default on two ranks (~80 s a "
    "step here, run by hand: rc 0); tests/lego/test_train_torchrun.py runs the same launcher and flags with 2 steps "
    "on a short task",
    "ray start": "starts a Ray cluster node (tests/lego/test_ray_rollout.py runs the backend on a local Ray)",
    "lego train lego/configs/cluster.toml": "needs a Ray cluster, Docker and the vLLM server; "
    "tests/lego/test_scaleout_recipe.py loads it with the README's flags and runs its preflight",
}
"""Commands (by prefix) that this test does not run, and why."""

NETWORK = ("lego harness install",)
"""Commands that download (pip/npm): run under the `network` marker."""

CLAIMS: dict[str, list[str]] = {
    "lego doctor": [r"lego doctor", r"\* required for the embedded default"],
    "lego bench probe default --where 'mutation_kind=and -> or' --where 'mutation_kind=or -> and' --token ' and' --token ' or'": [
        r'"tasks_probed": 20',
        r'"mean": 0\.49\d+',
        r'"positions": 40',
    ],
    "lego bench probe default --tasks boundary:heldout --token ' >=' --token ' <='": [
        r'"tasks_probed": 60',
        r'"mean": 0\.166\d+',
        r'"positions": 68',
    ],
    "lego config show -o training.steps=3": [r"(?m)^\[training\]$", r"(?m)^steps = 3$"],
    "lego tasks list builtin:heldout": [r"(?m)^lego-builtin__\S+\theldout\t"],
    "lego tasks export --format harbor starter:heldout --limit 2 --out harbor-tasks && lego tasks list harbor-tasks": [
        r"(?m)^2 harbor task\(s\) written to harbor-tasks$",
        r"(?m)^lego__lego-starter__heldout-0001\theldout\tlego/lego-starter__heldout-0001\t",
        r"(?m)^lego__lego-starter__heldout-0002\theldout\t",
    ],
    "lego harness install mini-swe-agent": [r"mini-swe-agent"],
    "lego run --harness lego-agent --engine oracle --task lego-builtin__roman-0001": [
        r"(?m)^reward      1\.0$",
        r"(?m)^tests       (\d+)/\1 passed$",
        r"protections held: egress_blocked, history_strip",
    ],
}
"""What each command run prints, as the README says (regexes over stdout)."""


def readme_commands() -> list[str]:
    """Every command in a ```bash block: comments dropped, backslash continuations joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            cmd = re.split(r"\s+#", line, maxsplit=1)[0].strip()
            if cmd and not cmd.startswith("#"):
                commands.append(cmd)
    return commands


def _excluded(cmd: str) -> bool:
    return any(cmd.startswith(prefix) for prefix in NOT_RUN)


def _run(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_every_readme_command_is_accounted_for() -> None:
    commands = readme_commands()
    assert any(c.startswith("lego run ") for c in commands), "README parsing found no `lego run` example"
    unaccounted = [c for c in commands if not _excluded(c) and c not in CLAIMS]
    assert not unaccounted, f"README commands neither run by this test nor listed in NOT_RUN: {unaccounted}"
    stale = [p for p in [*NOT_RUN, *CLAIMS] if not any(c.startswith(p) for c in commands)]
    assert not stale, f"listed here but gone from the README: {stale}"


@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param(c, marks=pytest.mark.network) if c.startswith(NETWORK) else c
        for c in readme_commands()
        if not _excluded(c)
    ],
)
def test_readme_command_runs_as_written(cmd: str, tmp_path: Path) -> None:
    """Run from a fresh directory, as a newcomer would after the set-up; exit 0 and the claimed output."""
    res = _run(cmd, tmp_path)
    assert res.returncode == 0, f"`{cmd}` exited {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    for claim in CLAIMS[cmd]:
        assert re.search(claim, res.stdout), f"`{cmd}` did not print {claim!r}:\n{res.stdout[-3000:]}"
    assert "Warning" not in res.stderr, f"`{cmd}` printed a warning:\n{res.stderr[-2000:]}"
