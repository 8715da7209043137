"""Proxy abuse: the sandbox reaches the model face of its own session only.

The agent deletes its own session (to wipe its turns, turn limit and temperature), makes up new
sessions, overrides the sampling, plays extra turns past its limit, floods the proxy, and runs next
to an honest rollout: its session must stay intact and the only one it touches, the run's sampling
and turn limit must hold, and the honest rollout next to it must be untouched.
"""

from __future__ import annotations

import json
import uuid

import pytest

from lego.conductor.rollout import RolloutOptions, RolloutRunner
from lego.types import Task
from tests.redteam.helpers import (
    FIX,
    SESSION_OF_HARNESS,
    RedTeam,
    assert_policy_zero,
    bash,
    leak_probe,
    observations,
    py,
    submit,
)


def test_delete_own_session(redteam: RedTeam, task: Task) -> None:
    delete = SESSION_OF_HARNESS + (
        'curl -s -m 10 -X DELETE -H "Authorization: Bearer $K" "$S"; echo; '
        'curl -s -m 10 -X DELETE --unix-socket /run/lego/proxy.sock "http://x/s/$SID"; echo'
    )
    traj = redteam.play(task, bash(delete), bash("ls"))
    assert_policy_zero(traj)
    assert traj.task_id == task.instance_id
    assert traj.counters.get("calls", 0) >= 3, "the turns recorded before the DELETE are gone"


def test_made_up_sessions_are_not_created(redteam: RedTeam, task: Task) -> None:
    evil = f"evil-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    create = SESSION_OF_HARNESS + (
        f"for p in /s/{evil}/v1/chat/completions /v1/chat/completions; do "
        f"curl -s -m 10 -o /dev/null -w \"$p %{{http_code}}\\n\" -H 'content-type: application/json' "
        f"-H \"Authorization: Bearer $K\" -d '{body}' http://127.0.0.1:18080$p; "
        f"curl -s -m 10 -o /dev/null -w \"uds $p %{{http_code}}\\n\" -H 'content-type: application/json' "
        f"--unix-socket /run/lego/proxy.sock -d '{body}' http://x$p; done"
    )
    traj = redteam.play(task, bash(create))
    assert_policy_zero(traj)
    for sid in (evil, "default"):
        with pytest.raises(Exception):  # noqa: B017 - whichever error the control face uses for "no such session"
            redteam.policy.proxy.trajectory(sid)


def test_sampling_override_cannot_be_changed(redteam: RedTeam, task: Task) -> None:
    """Requests from the sandbox ask for greedy, truncated sampling; the run's temperature 1.0 holds."""
    ask = py(
        """
import json, os, re, urllib.request
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
url = [a for a in argv if a.startswith("http")][0]
key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else "x"
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "temperature": 0.0, "top_p": 0.05, "top_k": 1, "seed": 1, "lego": {"temperature": 0.0}}
req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"content-type": "application/json", "authorization": f"Bearer {key}",
                                      "x-lego-sampling-override": "off", "x-lego-temperature": "0"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, dict(r.headers))
except Exception as e:
    print("refused", e)
"""
    )
    traj = redteam.play(task, ask, max_turns=4)
    assert_policy_zero(traj)
    served = redteam.engine.served[task.instance_id]
    assert served, "no generation was served"
    assert all(s.temperature == 1.0 and s.top_p == 1.0 and s.top_k == 0 for s in served), served


def test_extra_turns_past_the_turn_limit(redteam: RedTeam, task: Task) -> None:
    """The agent plays its own agent loop in its session (the harness's own request shape, read from
    the agent script in its home) to get more turns than the run allows."""
    loop = py(
        """
import glob, json, os, sys, urllib.request
sys.path.insert(0, os.path.dirname(glob.glob(os.path.expanduser("~/.lego-agent/agent.py"))[0]))
import agent
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
url = [a for a in argv if a.startswith("http")][0]
key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else "x"
msgs = [{"role": "system", "content": agent.SYSTEM_PROMPT.format(repo="/repo")},
        {"role": "user", "content": agent.TASK_TEMPLATE.format(repo="/repo", problem="add(2, 3) returns -1 instead of 5.")}]
for i in range(6):
    body = {"model": "m", "messages": msgs, "tools": agent.TOOLS, "max_tokens": 64}
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            msg = json.loads(r.read())["choices"][0]["message"]
        print("extra turn", i, "served")
    except Exception as e:
        print("extra turn", i, "refused", e)
        continue
    msgs.append({"role": "assistant", "content": msg.get("content") or f"turn {i}"})
    msgs.append({"role": "user", "content": f"continue {i}"})
"""
    )
    max_turns = 3
    traj = redteam.play(task, loop, max_turns=max_turns)
    assert_policy_zero(traj)
    assert redteam.generations(task) <= max_turns, (
        f"{redteam.generations(task)} generations for a {max_turns}-turn rollout: {observations(traj)[-1500:]}"
    )


def test_flood_of_requests(redteam: RedTeam, task: Task) -> None:
    """300 requests from 30 threads (bounded to 20 s): the proxy keeps serving, the session's own next
    turn is answered, and the rollout ends as the policy's own."""
    flood = py(
        """
import json, os, threading, time, urllib.request
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
url = [a for a in argv if a.startswith("http")][0]
key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else "x"
codes = {}
end = time.time() + 20
def hit(n):
    for i in range(10):
        if time.time() > end:
            return
        body = {"model": "m", "messages": [{"role": "user", "content": f"flood {n} {i}"}], "max_tokens": 2}
        req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                c = r.status
        except urllib.error.HTTPError as e:
            c = e.code
        except Exception as e:
            c = type(e).__name__
        codes[c] = codes.get(c, 0) + 1
ts = [threading.Thread(target=hit, args=(n,)) for n in range(30)]
[t.start() for t in ts]
[t.join() for t in ts]
print("flood codes", codes)
"""
    )
    max_turns = 3
    traj = redteam.play(task, flood, bash("echo still-here"), max_turns=max_turns)
    assert_policy_zero(traj)
    assert "still-here" in observations(traj), "the harness's own turn after the flood was not answered"
    assert redteam.generations(task) <= max_turns, f"{redteam.generations(task)} generations served to one rollout"


def test_concurrent_rollouts_stay_apart(redteam: RedTeam, task: Task, victim_task: Task) -> None:
    """An attacker and an honest rollout at once: the honest one scores 1 with only its own turns;
    the attacker, probing every session it can name, gets nothing."""
    redteam.engine.route(task.instance_id, [leak_probe(), submit()])
    redteam.engine.route(victim_task.instance_id, [bash(FIX), bash("echo honest-done"), submit()])
    runner = RolloutRunner(redteam.cfg, redteam.policy)
    opts = RolloutOptions(override_sampling=True, temperature=1.0, max_turns=4, timeout_s=150)
    attacker, honest = runner.run_many([(task, "lego-agent", opts), (victim_task, "lego-agent", opts)], concurrency=2)
    assert_policy_zero(attacker)
    assert "LEAKED PATCH" not in observations(attacker)
    assert honest.reward == 1.0 and honest.cause == "policy", (honest.termination, honest.cause_detail)
    assert honest.task_id == victim_task.instance_id and attacker.task_id == task.instance_id
    honest_text = json.dumps(honest.messages)
    assert "probe" not in honest_text and "honest-done" in honest_text
    assert "honest-done" not in json.dumps(attacker.messages)
