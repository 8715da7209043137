"""`lego bench probe` tells a skill the warm start has from a coin it cannot read.

On the shipped warm start and the starter held-out split: at the operator of `+`/`-` fixes it gives
the gold token high probability (it reads the viewed line and swaps), at `and`/`or` fixes about one
half (it picks without looking: README, "Where the room is"). A second model is scored on the same
positions and reported against the first."""

import json
import shutil

from click.testing import CliRunner
from transformers import AutoTokenizer

from lego.conductor.cli.main import cli
from lego.models.tiny import resolve_model

AND_OR = [
    "--where",
    "mutation_kind=and -> or",
    "--where",
    "mutation_kind=or -> and",
    "--token",
    " and",
    "--token",
    " or",
]


def _probe(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["bench", "probe", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_and_or_is_a_coin_and_plus_minus_a_skill(tmp_path):
    coin = _probe("default", "default", *AND_OR, "--out", str(tmp_path / "p.json"))
    assert coin["tasks_probed"] == 20 and json.loads((tmp_path / "p.json").read_text()) == coin
    base, again = coin["models"]
    assert base["positions"] == again["positions"] >= 20  # old_str and new_str of each conversation
    assert 0.4 < base["mean"] < 0.6
    assert again["minus_baseline"] == 0.0 and again["ratio_to_baseline"] == 1.0

    skill = _probe(
        "default",
        "--where",
        "mutation_kind=+ -> -",
        "--where",
        "mutation_kind=- -> +",
        "--token",
        " +",
        "--token",
        " -",
    )
    # 0.674 for the shipped warm start (0.931 for the starter-only one before it, README "Earlier")
    assert skill["models"][0]["mean"] > base["mean"] + 0.1


def test_bad_arguments_name_the_option_and_exit_2(tmp_path):
    runner = CliRunner()
    other = tmp_path / "other"
    shutil.copytree(resolve_model("default"), other)
    tok = AutoTokenizer.from_pretrained(other)
    tok.add_tokens(["<another-vocab>"])
    tok.save_pretrained(other)
    mixed = runner.invoke(cli, ["bench", "probe", "default", str(other), *AND_OR])
    assert mixed.exit_code == 2 and "another tokenizer" in mixed.output
    multi = runner.invoke(cli, ["bench", "probe", "default", "--token", "return a"])
    assert multi.exit_code == 2 and "--token" in multi.output and "exactly one token" in multi.output
    where = runner.invoke(cli, ["bench", "probe", "default", "--token", " and", "--where", "mutation_kind"])
    assert where.exit_code == 2 and "--where" in where.output and "KEY=VALUE" in where.output
    empty = runner.invoke(cli, ["bench", "probe", "default", "--token", " and", "--where", "mutation_kind=nope"])
    assert empty.exit_code == 2 and "no tasks" in empty.output
