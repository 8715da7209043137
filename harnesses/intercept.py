"""Interception mode: reach the recording proxy from a harness that cannot be given a base URL.

The harness keeps talking to its provider's real host (``api.anthropic.com``, ``api.openai.com``);
``mitmdump`` (mitmproxy, installed in its own venv under the lego data dir) runs inside the sandbox
as the harness's HTTPS proxy, terminates TLS with a CA generated for this sandbox, and sends every
request for a provider host to the proxy session instead (same path, under ``/s/<session>``).
Requests for any other host are answered 403 (the sandbox has no network anyway). The harness
trusts the CA through its runtime's own variables: ``NODE_EXTRA_CA_CERTS`` (Node/Bun),
``SSL_CERT_FILE`` and ``REQUESTS_CA_BUNDLE`` (Python, OpenSSL), and finds the proxy through
``HTTPS_PROXY``. Nothing in the harness is patched or configured beyond its environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lego.errors import HarnessError
from lego.harnesses.base import sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import Sandbox
from lego.types import Endpoint

__all__ = ["ADDON", "MITM_SPEC", "PROVIDER_HOSTS", "Interceptor"]

MITM_SPEC = InstallSpec(
    kind="pip", package="mitmproxy", version="11.0.2", executable="venv/bin/mitmdump", check_args=("--version",)
)
"""mitmproxy's pinned install (``lego harness install mitmproxy``)."""

PROVIDER_HOSTS = ("api.anthropic.com", "api.openai.com")

ADDON = '''"""lego interception addon: provider API hosts -> the recording proxy session."""
import os

from mitmproxy import http

TARGET = os.environ["LEGO_INTERCEPT_TARGET"].rstrip("/")
HOSTS = set(os.environ["LEGO_INTERCEPT_HOSTS"].split(","))


def request(flow: http.HTTPFlow) -> None:
    if flow.request.pretty_host in HOSTS:
        flow.request.url = TARGET + flow.request.path
    else:
        flow.response = http.Response.make(403, b"lego interception: only the provider API is reachable")
'''


class Interceptor:
    """Runs ``mitmdump`` in a sandbox and says which variables route a harness through it.

    Configuration only (port, hosts): what one sandbox's interceptor made (its CA) is in the
    environment :meth:`start` returns, so one adapter's interceptor serves concurrent rollouts."""

    name: ClassVar[str] = "mitmproxy"

    def __init__(self, port: int = 18443, hosts: tuple[str, ...] = PROVIDER_HOSTS) -> None:
        self.port = port
        self.hosts = hosts

    def ro_binds(self) -> list[Path]:
        return [MITM_SPEC.install_dir(self.name)]

    def start(self, sandbox: Sandbox, endpoint: Endpoint, wait_s: float = 60.0) -> dict[str, str]:
        """Start mitmdump in the background; return the harness's extra environment (the CA of this
        sandbox's mitmdump is ``SSL_CERT_FILE`` there)."""
        exe = MITM_SPEC.executable_path(self.name)
        if not exe.exists():
            raise HarnessError("interception needs mitmproxy; run `lego harness install mitmproxy`")
        home = sandbox_home(sandbox)
        confdir, addon = f"{home}/.mitmproxy", f"{home}/.lego/intercept_addon.py"
        sandbox.exec(["mkdir", "-p", confdir, f"{home}/.lego"], timeout=30)
        sandbox.write(addon, ADDON.encode())
        env = {"LEGO_INTERCEPT_TARGET": endpoint.anthropic_base_url, "LEGO_INTERCEPT_HOSTS": ",".join(self.hosts)}
        cmd = (
            f"nohup {exe} --quiet --listen-host 127.0.0.1 --listen-port {self.port} --set confdir={confdir} "
            f"--set connection_strategy=lazy -s {addon} > {home}/.lego/mitmdump.log 2>&1 &"
        )
        res = sandbox.exec(["bash", "-c", cmd], env=env, timeout=30)
        if res.exit_code != 0:
            raise HarnessError(f"mitmdump did not start in the sandbox: {res.stderr[-1000:]}")
        ca_path = f"{confdir}/mitmproxy-ca-cert.pem"
        # Wait inside one command: between commands the sandbox stops (SIGSTOP) whatever an earlier
        # command left running, mitmdump included, so polling from outside let it run only while a
        # probe ran (18 s to start instead of under 1 s).
        probe = f"test -s {ca_path} && (exec 3<>/dev/tcp/127.0.0.1/{self.port}) 2>/dev/null"
        wait = f"until {probe}; do sleep 0.1; done"
        if sandbox.exec(["bash", "-c", wait], timeout=wait_s).exit_code != 0:
            log = sandbox.exec(["bash", "-c", f"tail -c 2000 {home}/.lego/mitmdump.log"], timeout=10).stdout
            raise HarnessError(f"mitmdump did not listen on 127.0.0.1:{self.port} within {wait_s:.0f} s:\n{log}")
        return self.environment(ca_path)

    def environment(self, ca_path: str) -> dict[str, str]:
        """Proxy and CA variables for Node/Bun, Python and OpenSSL clients."""
        url = f"http://127.0.0.1:{self.port}"
        return {
            "HTTPS_PROXY": url,
            "https_proxy": url,
            "HTTP_PROXY": url,
            "http_proxy": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "NODE_EXTRA_CA_CERTS": ca_path,
            "SSL_CERT_FILE": ca_path,
            "REQUESTS_CA_BUNDLE": ca_path,
        }
