"""`lego doctor`: what this machine has for lego, and what to do about each missing piece."""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["Check", "collect_checks", "doctor"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor table."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    versioned = [line for line in lines if "version" in line.lower()]
    return (versioned or lines or [""])[0].strip()


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _check_torch() -> list[Check]:
    """torch and the GPU, read without importing torch (seconds): its package metadata says the build,
    the NVIDIA driver (``nvidia-smi``) which GPUs there are."""
    version = _pkg_version("torch")
    if version is None:
        return [
            Check("torch", False, "not installed", "pip install torch==2.13.0 (CPU) or a CUDA build", required=True)
        ]
    cuda_build = "+cpu" not in version
    gpus = (_run(["nvidia-smi", "-L"], timeout=5) or "") if shutil.which("nvidia-smi") else ""
    found = cuda_build and gpus.startswith("GPU")
    detail = f"{version}; " + (f"CUDA build, {gpus}" if found else "CPU build" if not cuda_build else "no GPU found")
    return [
        Check("torch", True, detail, required=True),
        Check(
            "CUDA GPU",
            found,
            "found" if found else "none: training and serving run on the CPU (fine for the embedded default)",
            "" if found else "for Qwen3-class models install a CUDA torch build on a GPU machine",
        ),
    ]


def _check_dirs() -> list[Check]:
    """Where lego keeps what it downloads and builds (LEGO_DATA_DIR) and what it can rebuild (LEGO_CACHE_DIR)."""
    from lego.paths import cache_dir, data_dir

    return [
        Check("data dir", True, f"{data_dir()} (harness installs, sandbox runtimes; LEGO_DATA_DIR moves it)"),
        Check(
            "cache dir",
            True,
            f"{cache_dir()} (models, task repos and environments, tokenizers; LEGO_CACHE_DIR moves it)",
        ),
    ]


def _check_docker() -> Check:
    client = shutil.which("docker")
    if client is None:
        return Check(
            "docker engine",
            False,
            "no docker client",
            "install Docker (apt-get install docker.io) for sandbox.kind='docker'",
        )
    info = _run([client, "info", "--format", "{{.ServerVersion}}"], timeout=5)
    if info is None:
        return Check(
            "docker engine",
            False,
            "client present, no engine answering",
            "start one: dockerd (as root), or use sandbox.kind='local'",
        )
    return Check("docker engine", True, f"server {info}")


def _check_bwrap() -> Check:
    exe = shutil.which("bwrap")
    if exe is None:
        return Check(
            "bubblewrap",
            False,
            "missing: local sandboxes cannot isolate agents",
            "apt-get install bubblewrap (or pass --unsafe-no-isolation on a disposable machine)",
            required=True,
        )
    probe = _run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"])
    if probe is None:
        return Check(
            "bubblewrap",
            False,
            "installed but cannot create namespaces here",
            "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root",
        )
    return Check("bubblewrap", True, _run([exe, "--version"]) or "ok", required=True)


def _check_sandbox_limits() -> list[Check]:
    """What a local sandbox's process and memory budgets rest on here (cgroup or fallback)."""
    from lego.sandboxes.cgroup import enforcement

    return [Check(f"sandbox {name} budget", "cgroup" in how, how) for name, how in enforcement().items()]


def _check_binary(name: str, argv: list[str], fix: str, required: bool = False) -> Check:
    if shutil.which(argv[0]) is None:
        return Check(name, False, "missing", fix, required=required)
    return Check(name, True, _run(argv) or "present", required=required)


def _check_harnesses() -> list[Check]:
    """One line per registered harness: built in, installed (with its pinned version), or what to run."""
    from lego.harnesses.base import HARNESSES, install_spec_of
    from lego.harnesses.install import installed

    out = []
    for name in HARNESSES.names():
        spec = install_spec_of(name)
        if spec is None:
            out.append(Check(f"harness {name}", True, "built in"))
            continue
        record = installed(name)
        if record is None:
            out.append(
                Check(
                    f"harness {name}",
                    False,
                    f"not installed (pins {spec.package}=={spec.version})",
                    f"lego harness install {name}",
                )
            )
        else:
            out.append(Check(f"harness {name}", True, f"{record.version} under the lego data dir"))
    return out


def _packages() -> list[Check]:
    checks = []
    for pkg, fix in (("transformers", "pip install transformers"),):
        v = _pkg_version(pkg)
        checks.append(Check(pkg, v is not None, v or "missing", "" if v else fix, required=True))
    v = _pkg_version("vllm")
    checks.append(
        Check(
            "vllm",
            v is not None,
            v or "not installed (needed only for engine.kind='vllm' on a GPU)",
            "" if v else "pip install 'lego-rl[vllm]' on a CUDA machine",
        )
    )
    return checks


def collect_checks() -> list[Check]:
    """Everything `lego doctor` reports, in table order. The checks that run programs (docker, bwrap,
    nvidia-smi, ...) run side by side: the answer takes as long as the slowest, not their sum."""
    groups: list[Callable[[], Check | list[Check]]] = [
        lambda: Check("python", True, f"{platform.python_version()} ({platform.machine()})", required=True),
        _check_torch,
        _packages,
        _check_docker,
        _check_bwrap,
        _check_sandbox_limits,
        lambda: _check_binary(
            "socat", ["socat", "-V"], "apt-get install socat (bridges the proxy into sandboxes)", required=True
        ),
        lambda: _check_binary("git", ["git", "--version"], "apt-get install git", required=True),
        lambda: _check_binary(
            "node", ["node", "--version"], "install Node.js >= 20 for opencode, claude-code and codex"
        ),
        _check_harnesses,
        _check_dirs,
    ]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        results = list(pool.map(lambda check: check(), groups))
    return [c for r in results for c in (r if isinstance(r, list) else [r])]


@click.command()
def doctor() -> None:
    """Check this machine for everything lego uses and say what to do about each missing piece.

    Required items (marked *) must be present for the embedded default; the rest unlock GPU
    serving (vllm), Docker sandboxes and third-party harnesses. Exit code 1 if a required item
    is missing.
    """
    checks = collect_checks()
    table = Table(
        title="lego doctor",
        caption="* required for the embedded default (`lego train` on this CPU); the rest unlock GPU serving, "
        "Docker sandboxes and third-party harnesses",
        show_lines=False,
    )
    table.add_column("component")
    table.add_column("status")
    table.add_column("detail")
    table.add_column("what to do")
    for c in checks:
        status = "[green]ok[/green]" if c.ok else ("[red]MISSING[/red]" if c.required else "[yellow]absent[/yellow]")
        table.add_row(escape(c.name) + (" *" if c.required else ""), status, escape(c.detail), escape(c.fix))
    Console().print(table)
    if any(c.required and not c.ok for c in checks):
        raise SystemExit(1)
