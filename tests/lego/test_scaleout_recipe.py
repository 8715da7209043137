"""The GPU user's recipe (README, "Scale-out"): the shipped configs load, `lego config show` writes every
key of them and reads back the same config, the README's commands name existing configs and keys, its
`vllm serve` flags are the ones lego's vLLM client and weight sync need, and the vLLM recipe runs
against a stand-in for `vllm serve` (the real server needs a GPU: not run here)."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lego.config import LegoConfig, config_doc, load_config, to_toml, validate_config
from lego.config.base import Section
from lego.config.loading import default_config_path
from tests.engines.vllm_standin import VLLMStandIn
from tests.lego.calc_task import make_calc_tasks

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(default_config_path().parent.glob("*.toml"))
LEGO = str(Path(sys.executable).parent / "lego")


def _scaleout_commands() -> list[str]:
    """The commands of the README's Scale-out section (continuations joined, comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Scale-out\n") : text.index("\n## ", text.index("## Scale-out\n") + 1)]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            cmd = re.split(r"\s+#", line, maxsplit=1)[0].strip()
            if cmd:
                out.append(cmd)
    return out


def _lego_train_commands() -> list[tuple[str, list[str]]]:
    """(config path, -o overrides) of every `lego train` the section shows."""
    out = []
    for cmd in _scaleout_commands():
        argv = [a for a in shlex.split(cmd) if not re.fullmatch(r"[A-Z_]+=\S*", a)]
        if argv[:2] == ["lego", "train"]:
            overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
            out.append((argv[2], overrides))
    return out


def _vllm_serve_commands() -> list[tuple[dict[str, str], list[str]]]:
    """(environment, argv) of every `vllm serve` the section shows."""
    out = []
    for cmd in _scaleout_commands():
        words = shlex.split(cmd.rstrip("&"))
        env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S*", w))
        argv = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]
        if argv[:2] == ["vllm", "serve"]:
            out.append((env, argv))
    return out


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# ---------------------------------------------------------------- configs and `lego config show`


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads_and_reads_back_from_config_show(path: Path) -> None:
    cfg = load_config(path)
    again = validate_config(tomllib.loads(to_toml(cfg)))
    assert again == cfg


def _keys_written(text: str) -> set[tuple[str, ...]]:
    """Every (table path + key) the TOML text sets or names in an unset-field comment, and every table."""
    keys: set[tuple[str, ...]] = set()
    table: tuple[str, ...] = ()
    for line in text.splitlines():
        if line.startswith("["):
            node: Any = tomllib.loads(line + "\n")  # the header's path, quoting and all, as TOML reads it
            path = []
            while isinstance(node, dict) and len(node) == 1:
                key = next(iter(node))
                path.append(key)
                node = node[key]
            table = tuple(path)
            keys.update(table[:n] for n in range(1, len(table) + 1))  # [a.b.c] writes a and a.b too
        elif m := re.match(r"^(?:# )?([A-Za-z0-9_-]+) = ", line):
            keys.add((*table, m.group(1)))
    return keys


@pytest.mark.parametrize("path", [None, *CONFIGS], ids=["defaults", *[p.name for p in CONFIGS]])
def test_config_show_writes_every_key_the_unset_ones_as_comments(path: Path | None) -> None:
    cfg = LegoConfig() if path is None else load_config(path)
    text = to_toml(cfg)
    written = _keys_written(text)
    # every field of every section; a harness's typed options only where that harness is configured
    missing = [
        f.key
        for f in config_doc()
        if not f.key.startswith("harness.options.") and tuple(f.key.split(".")) not in written
    ]
    assert missing == []
    assert "# vllm_url = <str>  # unset; Base URL of `vllm serve` (engine.kind='vllm').\n" in to_toml(LegoConfig())
    assert re.search(r"(?m)^# docker_image = <str>  # unset; ", text)


def test_config_show_round_trips_set_and_unset_optional_fields() -> None:
    cfg = load_config(None, ["engine.vllm_url=http://10.0.0.2:8000", "sandbox.workdir=/scratch", "tasks.limit=5"])
    text = to_toml(cfg)
    assert 'vllm_url = "http://10.0.0.2:8000"' in text and "# vllm_api_key = <str>  # unset" in text
    assert validate_config(tomllib.loads(text)) == cfg


class _Deep(Section):
    y: int = 1


class _Inner(Section):
    x: int | None = None
    deep: _Deep = _Deep()


class _Outer(Section):
    top: str | None = None
    inner: _Inner = _Inner()


def test_an_unset_field_of_a_table_of_sub_tables_only_gets_its_header() -> None:
    """tomli_w writes no [inner] for a table whose only keys are sub-tables; its comment still has a home."""
    text = to_toml(_Outer())
    assert text.startswith("# top = <str>  # unset\n")
    assert "[inner.deep]\ny = 1\n" in text and "[inner]\n# x = <int>  # unset\n" in text
    assert _Outer.model_validate(tomllib.loads(text)) == _Outer()


# ---------------------------------------------------------------- the README's commands


def test_the_readme_shows_a_command_for_each_shipped_recipe() -> None:
    named = {Path(p).name for p, _ in _lego_train_commands()}
    assert named == {p.name for p in CONFIGS if p.name != "default.toml"}
    assert len(_vllm_serve_commands()) == 2  # the LoRA hot-load and the full reload


@pytest.mark.parametrize("path,overrides", _lego_train_commands(), ids=lambda v: str(v))
def test_each_readme_train_command_loads_with_its_overrides(path: str, overrides: list[str]) -> None:
    cfg = load_config(ROOT / path, overrides)  # unknown keys and bad combinations raise here
    assert cfg.engine.kind == "vllm" and cfg.engine.vllm_url and cfg.engine.vllm_weights_dir
    assert cfg.training.dtype == "bfloat16"


def test_the_readme_vllm_flags_are_what_lego_needs() -> None:
    """What lego's vLLM client and weight sync need of the server (lego/engines/vllm.py,
    lego/training/weight_sync.py), for each weight delivery the section shows."""
    lora = load_config(ROOT / "lego/configs/vllm-qwen3.toml")
    full = load_config(ROOT / "lego/configs/vllm-qwen3.toml", ["engine.vllm_weight_sync=full"])
    by_sync: dict[str, tuple[dict[str, str], list[str]]] = {}
    for env, argv in _vllm_serve_commands():
        assert _flag(argv, "--logprobs-mode") == "processed_logprobs"  # log_softmax(logits / T)
        assert _flag(argv, "--dtype") == "bfloat16" == lora.training.dtype
        assert _flag(argv, "--generation-config") == "vllm"  # no checkpoint sampling defaults (penalties)
        assert _flag(argv, "--port") == lora.engine.vllm_url.rsplit(":", 1)[1]  # type: ignore[union-attr]
        by_sync["lora" if "--enable-lora" in argv else "full"] = (env, argv)
    env, argv = by_sync["lora"]
    assert env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == "True"  # /v1/load_lora_adapter
    assert int(_flag(argv, "--max-lora-rank") or 0) >= lora.training.lora_rank
    assert int(_flag(argv, "--max-loras") or 1) >= 2  # the new adapter loads before the old one unloads
    assert argv[2] == lora.engine.model  # the trainer and the server start from the same checkpoint
    env, argv = by_sync["full"]
    assert env.get("VLLM_SERVER_DEV_MODE") == "1"  # /collective_rpc and /reset_prefix_cache
    assert argv[2] == full.engine.vllm_weights_dir  # vLLM serves the directory the trainer rewrites


# ---------------------------------------------------------------- running them here


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lego(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LEGO, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def test_vllm_recipe_without_a_server_says_to_start_vllm_serve(tiny_model_dir: Path, tmp_path: Path) -> None:
    res = _lego(
        "train",
        str(ROOT / "lego/configs/vllm-qwen3.toml"),
        "-o",
        f"engine.model={tiny_model_dir}",
        "-o",
        f"engine.vllm_url=http://127.0.0.1:{_free_port()}",
        "-o",
        f"training.out_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "is `vllm serve` running there?" in res.stderr
    assert not (tmp_path / "run").exists()  # a run that never started leaves nothing for --resume


def _docker_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_cluster_recipe_preflight_names_what_this_machine_lacks(tmp_path: Path) -> None:
    """Before anything loads: the placeholder task file, then (with tasks that exist) the Docker engine."""
    cluster = str(ROOT / "lego/configs/cluster.toml")
    res = _lego("train", cluster, cwd=tmp_path)
    assert res.returncode == 2 and "tasks.source" in res.stderr and "/data/tasks.jsonl" in res.stderr, res.stderr
    if _docker_answers():
        pytest.skip("a Docker engine answers here: the sandbox preflight passes")
    res = _lego("train", cluster, "-o", "tasks.source=builtin", cwd=tmp_path)
    assert res.returncode == 2 and "sandbox.kind: 'docker' but no Docker engine answers here" in res.stderr


@pytest.mark.slow
def test_vllm_recipe_trains_against_a_vllm_standin(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The README's `lego train lego/configs/vllm-qwen3.toml`, sized down (tiny model, one step of two
    rollouts): the adapter reaches the server through /v1/load_lora_adapter after the update."""
    tasks = make_calc_tasks(tmp_path / "calc")
    with VLLMStandIn(tiny_model_dir) as server:
        res = _lego(
            "train",
            str(ROOT / "lego/configs/vllm-qwen3.toml"),
            *("-o", f"engine.model={tiny_model_dir}"),
            *("-o", f"engine.vllm_url={server.url}"),
            *("-o", f"engine.vllm_weights_dir={tmp_path / 'weights'}"),
            *("-o", f"tasks.source={tasks}"),
            *("-o", f"training.out_dir={tmp_path / 'run'}"),
            *("-o", "training.steps=1", "-o", "training.tasks_per_step=1", "-o", "algorithm.group_size=2"),
            *("-o", "training.concurrency=2", "-o", "harness.max_turns=2"),
            *("-o", "harness.options={lego-agent = {max_tokens = 24}}"),
            cwd=tmp_path,
        )
        loads = list(server.loads)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert [route for route, _, _ in loads] == ["/v1/load_lora_adapter"]
    assert (tmp_path / "weights" / "adapters" / "lego-policy-v1" / "adapter_config.json").exists()
