import json
import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from lego.errors import ResumeError
from lego.training.checkpoint import load_latest, read_config
from lego.training.trainer import Trainer


def _params(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def test_two_steps_equal_step_save_load_step(model_dir, items, make_config, tmp_path):
    cfg = make_config(micro_batch_size=4)
    a, b = items[:4], items[4:]
    straight = Trainer(model_dir, cfg)
    straight.step(a)
    m_straight = straight.step(b)

    first = Trainer(model_dir, cfg)
    first.step(a)
    path = first.save(tmp_path, extra={"next_task": 7})
    assert path.name == "step_000001"
    assert load_latest(tmp_path) == path
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000001"

    resumed = Trainer(model_dir, cfg)
    assert resumed.load(path) == {"next_task": 7}
    assert resumed.step_count == 1
    m_resumed = resumed.step(b)
    assert resumed.step_count == 2
    ps, pr = _params(straight), _params(resumed)
    assert all(torch.equal(ps[k], pr[k]) for k in ps)  # AdamW moments restored exactly
    assert m_straight["actor/pg_loss"] == m_resumed["actor/pg_loss"]


def test_checkpoint_is_a_loadable_model_dir_with_tokenizer_files(model_dir, items, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    trainer.step(items)
    path = trainer.save(tmp_path)
    assert (path / "model.safetensors").exists() and (path / "tokenizer_config.json").exists()
    loaded = AutoModelForCausalLM.from_pretrained(path)
    sd = trainer.model.state_dict()
    assert all(torch.equal(v, sd[k]) for k, v in loaded.state_dict().items())
    assert read_config(path) == trainer.config
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["step"] == 1


def test_rng_states_restored(model_dir, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    path = trainer.save(tmp_path)
    expect = (random.random(), float(np.random.rand()), torch.rand(3))
    other = Trainer(model_dir, make_config(seed=99))  # reseeds torch on construction
    random.seed(5)
    other.load(path)
    got = (random.random(), float(np.random.rand()), torch.rand(3))
    assert got[0] == expect[0] and got[1] == expect[1] and torch.equal(got[2], expect[2])


def test_crash_mid_save_keeps_the_previous_checkpoint(model_dir, items, make_config, tmp_path, monkeypatch):
    trainer = Trainer(model_dir, make_config())
    trainer.step(items)
    good = trainer.save(tmp_path)
    trainer.step(items)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("lego.training.checkpoint._rng_state", boom)
    with pytest.raises(OSError, match="disk full"):
        trainer.save(tmp_path)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]  # no partial dir, no temp left
    assert load_latest(tmp_path) == good


def test_resave_same_step_replaces_it(model_dir, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    trainer.save(tmp_path, extra={"v": 1})
    trainer.save(tmp_path, extra={"v": 2})
    assert Trainer(model_dir, make_config()).load(load_latest(tmp_path)) == {"v": 2}


def test_latest_falls_back_to_highest_complete_step(model_dir, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    trainer.save(tmp_path)
    trainer.step_count = 2
    trainer.save(tmp_path)
    (tmp_path / "checkpoints" / "latest").unlink()
    assert load_latest(tmp_path).name == "step_000002"
    assert load_latest(tmp_path / "nothing") is None


def test_incompatible_config_is_refused_with_the_fields(model_dir, make_config, tmp_path):
    path = Trainer(model_dir, make_config()).save(tmp_path)
    cfg = make_config(lr=5e-4, steps=50)  # these may change
    Trainer(model_dir, cfg).load(path)
    bad = make_config()
    bad.algorithm.clip_high = 5e-4
    bad.algorithm.temperature = 0.8
    with pytest.raises(
        ResumeError, match=r"algorithm.clip_high: run has 0.0004, config has 0.0005.*algorithm.temperature"
    ):
        Trainer(model_dir, bad).load(path)


def test_keep_last_and_leftover_cleanup(model_dir, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config())
    leftover = tmp_path / "checkpoints" / ".step_000009.abc.tmp"
    leftover.mkdir(parents=True)
    for step in range(4):
        trainer.step_count = step
        trainer.save(tmp_path, keep_last=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["latest", "step_000002", "step_000003"]


def test_lr_change_on_resume_takes_effect(model_dir, items, make_config, tmp_path):
    trainer = Trainer(model_dir, make_config(lr=1e-3))
    trainer.step(items)
    path = trainer.save(tmp_path)
    resumed = Trainer(model_dir, make_config(lr=1e-4))
    resumed.load(path)
    assert resumed.optimizer.param_groups[0]["lr"] == 1e-4
    assert resumed.optimizer.state  # moments restored


KILL_SCRIPT = """
import sys
from lego.config import LegoConfig
from lego.training.trainer import Trainer
cfg = LegoConfig.model_validate({"training": {"lr": 1e-3}})
t = Trainer(sys.argv[1], cfg, device="cpu")
while True:
    t.step_count += 1
    t.save(sys.argv[2], extra={"step": t.step_count}, keep_last=3)
"""


def test_sigkill_during_saves_leaves_a_loadable_latest(model_dir, make_config, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(model_dir), str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while load_latest(tmp_path) is None or load_latest(tmp_path).name < "step_000003":
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(random.uniform(0.0, 0.3))  # somewhere inside a later save
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    path = load_latest(tmp_path)
    extra = Trainer(model_dir, make_config(lr=1e-3)).load(path)
    assert extra == {"step": int(path.name.split("_")[1])}
