"""Redaction on real-looking secrets in the places an agent meets them: .env files, shell, config, code, JSON."""

from __future__ import annotations

import pytest

from lego.learn.redact import Redactor, placeholder

# Shaped like the real thing (lengths, alphabets, prefixes); none is a live credential.
OPENAI = "sk-proj-Xq3vT9bL2mN7pR4sW8yZ1aC5dE6fG0hJ2kL4mN6pQ8rS0tU2vW4xY6zA8bC0dE2fG4hJ6kL8"
ANTHROPIC = "sk-ant-api03-9fKx2Lm4Np6Qr8St0Uv2Wx4Yz6Ab8Cd0Ef2Gh4Ij6Kl8Mn0Op2Qr4St6Uv8Wx0Yz2Ab4Cd6Ef8Gh0Ij2Kl4-AbCdEfAA"
GITHUB = "ghp_R8sT2uV4wX6yZ8aB0cD2eF4gH6iJ8kL0mN2o"
GITHUB_PAT = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwX"
AWS_ID = "AKIAZ3MXQ7RL4TWN2KPB"
AWS_SECRET = "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"
SLACK = "xoxb-2718281828-3141592653589-Qz7Xw2Lk9Vb4Nm1Hj6Gf3Ds8"
JWT = (
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwiaWF0IjoxNzAwMDAwMDAwfQ."
    "Tq9Xb2Lm4Np6Qr8St0Uv2Wx4Yz6Ab8Cd0Ef2Gh4Ij6Kl8Mn0Op2Qr4"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBk3Xq9Lm2Np4Qr6St8Uv0Wx2Yz4Ab6Cd8Ef0Gh2Ij4AAAAJgAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
DOTENV = f"""# local settings
DATABASE_URL=postgres://app:Tr0ub4dor-3@db.internal:5432/app
STRIPE_SECRET_KEY="rk_live_51Hb2Lm4Np6Qr8St0Uv2Wx"
DB_PASSWORD=correct-horse-battery-9
SESSION_TOKEN=5f2b8c1e9d4a7f3b6c0e2d8a1f4b7c9e
AWS_ACCESS_KEY_ID={AWS_ID}
AWS_SECRET_ACCESS_KEY={AWS_SECRET}
DEBUG=true
MAX_TOKENS=4096
"""
SECRETS_IN_DOTENV = [
    "Tr0ub4dor-3",
    "rk_live_51Hb2Lm4Np6Qr8St0Uv2Wx",
    "correct-horse-battery-9",
    "5f2b8c1e9d4a7f3b6c0e2d8a1f4b7c9e",
    AWS_ID,
    AWS_SECRET,
]


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"export OPENAI_API_KEY={OPENAI}", OPENAI, "openai_key"),
        (f"client = Anthropic(api_key='{ANTHROPIC}')", ANTHROPIC, "anthropic_key"),
        (f"git clone https://{GITHUB}@github.com/me/repo", GITHUB, "github_token"),
        (f"GH_TOKEN={GITHUB_PAT} gh pr list", GITHUB_PAT, "github_token"),
        (f"[default]\naws_access_key_id = {AWS_ID}", AWS_ID, "aws_access_key"),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_key"),
        (f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET, "secret_value"),
        (f"SLACK_BOT={SLACK}", SLACK, "slack_token"),
        (f"curl -H 'Authorization: Bearer {JWT}' https://api", JWT, "jwt"),
        (
            "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0' x",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "bearer",
        ),
        ("Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "YWxhZGRpbjpvcGVuc2VzYW1l", "authorization"),
        (f"$ cat ~/.ssh/id_ed25519\n{PEM}\n$ ", PEM, "private_key"),
        (PEM[:120], PEM[:120], "private_key"),  # a key file cut off mid-way still goes
        ("redis://default:Zq8Lm2Np4Qr6@cache:6379/0", "Zq8Lm2Np4Qr6", "url_password"),
    ],
)
def test_each_kind_of_secret_becomes_its_placeholder(text: str, secret: str, kind: str) -> None:
    out, n = Redactor().redact(text)
    assert secret not in out
    assert placeholder(kind) in out
    assert n >= 1


def test_a_dotenv_file_keeps_its_keys_and_harmless_values_and_loses_every_secret() -> None:
    out, n = Redactor().redact(DOTENV)
    for secret in SECRETS_IN_DOTENV:
        assert secret not in out
    assert n == len(SECRETS_IN_DOTENV)
    assert "DB_PASSWORD=[REDACTED:secret_value]" in out
    assert 'STRIPE_SECRET_KEY="[REDACTED:secret_value]"' in out
    assert "DEBUG=true" in out and "MAX_TOKENS=4096" in out and "# local settings" in out


def test_code_that_talks_about_tokens_is_left_alone() -> None:
    code = (
        "def login(token: str, password: str | None = None) -> Session:\n"
        "    token = self.token\n"
        "    password = get_password()\n"
        "    max_tokens = 10\n"
        "    tokenizer = AutoTokenizer.from_pretrained(path)\n"
        "    headers = {'Authorization': f'Bearer {token}'}\n"
        "    GITHUB_TOKEN=$(gh auth token)\n"
    )
    assert Redactor().redact(code) == (code, 0)


def test_redaction_is_idempotent_and_the_placeholder_holds_nothing_of_the_secret() -> None:
    r = Redactor()
    once, _ = r.redact(DOTENV + OPENAI + "\n" + PEM)
    assert r.redact(once) == (once, 0)
    assert "Tr0ub" not in once and "5f2b" not in once


def test_literals_are_redacted_wherever_they_appear_and_json_secret_keys_whole() -> None:
    key = "lego-3xQ9bL2mN7pR4sW8yZ1aC5dE6fG0hJ2kL4mN6pQ8r"
    r = Redactor(["hunter2-of-mine"]).with_literals([key])
    obj = {
        "role": "tool",
        "content": f"OPENAI_API_KEY={key}\nmy pass is hunter2-of-mine",
        "arguments": '{"command": "env"}',
        "config": {"password": "plain", "api_key": "abc", "timeout": "30"},
    }
    out, n = r.redact_json(obj)
    text = repr(out)
    assert key not in text and "hunter2-of-mine" not in text and "plain" not in text and "'abc'" not in text
    assert out["config"]["timeout"] == "30"
    assert n == 4
