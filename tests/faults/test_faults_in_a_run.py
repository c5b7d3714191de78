"""Faults inside a running local GRPO run, each injected while a step's episodes are in flight:

- the `env:` calculator server killed (SIGKILL): the supervisor starts it again on its port, the
  episodes whose tool calls it dropped end as `tool_server_down`, the step trains on the others;
- a rollout worker process killed (`rollout.workers: 2`): its episodes end as `worker_died`, a new
  process takes its place, the step completes;
- a gateway agent process killed: its episodes fail with its exit code, the next episode starts
  a new process;
- a server that will not come back (its port taken): the run stops with its log's last lines.

A real run (AgentTrainer on the tiny random model, the real calculator server, real worker and
agent processes) whose policy is scripted: it writes the calculator calls a trained model would,
and holds the step's first calls so that the fault lands on a known set of episodes in flight.
The samples lost must be those and only those; file descriptors, child processes and RSS after
each fault return to their level before it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import faults_support
import pytest
from faults_support import (
    ROOT,
    assert_flat,
    assert_flat_after_run,
    local_config,
    record,
    resources,
    settled_resources,
    warm_up,
    write_config,
)

from aworld_train import AgentTrainer
from aworld_train.core.errors import ToolServerLost
from aworld_train.engines.local import startup, training
from aworld_train.rollout.policies.client import Generation

pytestmark = pytest.mark.timeout(600)

EPISODES = 8  # 4 tasks x 2 samples a step


class FaultPolicy:
    """Answers calculator tasks as a trained model would (a call, then the result, wrong on odd
    seeds so groups differ); in a step with a fault it holds every episode's first call until
    all of them arrived, lets the first sample of each task finish (`partial`), injects the
    fault, then lets the others go on into it."""

    def __init__(self, local, tokenizer, stop_id: int) -> None:
        self.local = local  # the learner takes its lock and pad id
        self.tokenizer = tokenizer
        self.stop_id = stop_id
        self.fault: Callable[[], None] | None = None
        self.partial = True
        self.lost: int = 0  # episodes the fault was let loose on
        self._held: dict[str, list[asyncio.Future]] = {}

    def __getattr__(self, name: str):
        return getattr(self.local, name)

    async def generate(self, prompt_ids: list[int], sampling) -> Generation:
        text = self.tokenizer.decode(prompt_ids)
        tail = text[text.rindex("What is") :]
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", tail)
        if self.fault is not None and not results:
            gate = asyncio.get_running_loop().create_future()
            self._held.setdefault(tail, []).append(gate)
            if sum(len(g) for g in self._held.values()) == EPISODES:
                asyncio.ensure_future(self._inject())
            await gate
        if results:
            answer = int(float(results[-1])) + (sampling.seed or 0) % 2
            reply = f"The answer is {answer}."
        else:
            expression = re.findall(r"What is ([^?]+)\?", tail)[0]
            reply = "<tool_call>\n" + json.dumps(
                {"name": "calculate", "arguments": {"expression": expression}}
            )
            reply += "\n</tool_call>"
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.stop_id]
        return Generation(ids, [-0.5] * len(ids), "stop")

    async def _inject(self) -> None:
        groups, self._held = list(self._held.values()), {}
        first = [g[0] for g in groups] if self.partial else []
        rest = [f for g in groups for f in g if f not in first]
        target = faults_support.SCORED[0] + len(first)
        for gate in first:
            gate.set_result(None)
        try:
            while faults_support.SCORED[0] < target:  # they finished and were scored
                await asyncio.sleep(0.02)
            self.fault()
            self.lost = len(rest)
        finally:  # a fault that failed to happen must not leave the step waiting
            self.fault = None
            for gate in rest:
                gate.set_result(None)


def faulty_run(config: Path, faults: dict[int, tuple[Callable, bool]], steps: dict | None = None) -> dict:
    """`AgentTrainer(config).train()` with the scripted policy; fault (kill, partial) at each step
    named in `faults`. Per step (into `steps`, kept where the run raises): the resources after it,
    the episodes let into the fault, and the supervisor's restarts so far."""
    steps = {} if steps is None else steps
    runner = startup.local_runner

    def scripted_runner(*args, **kwargs):
        episode_runner, policy = runner(*args, **kwargs)
        stop = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return episode_runner, FaultPolicy(policy, policy.tokenizer, stop)

    train_step = training.LocalTraining.train_step

    def step_with_fault(self, step: int):
        kill, partial = faults.get(step + 1, (None, True))
        if kill is not None:
            self.policy.fault, self.policy.partial = (lambda: kill(self)), partial
        metrics = train_step(self, step)
        first = steps.get(1, {}).get("resources")
        steps[step + 1] = {
            "resources": settled_resources(first) if first else resources(),
            "lost": self.policy.lost if kill is not None else 0,
            "restarts": list(self.envs.restarts),
            "replaced": getattr(self.runner._batches.pool, "replaced", 0),
        }
        return metrics

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(startup, "local_runner", scripted_runner)
        patch.setattr(training.LocalTraining, "train_step", step_with_fault)
        summary = AgentTrainer(config=str(config)).train()
    run = Path(summary["run_dir"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"steps": steps, "rows": [r for r in rows if r["phase"] == "train"], "run": run}


def kill_server(run: training.LocalTraining) -> None:
    run.envs.servers()[0].kill()


def kill_worker(run: training.LocalTraining) -> None:
    os.kill(run.runner._batches.pool.workers[1].process.pid, signal.SIGKILL)


KILLED_AGENTS: list = []  # the agent process objects kill_agent_process killed


def kill_agent_process(run: training.LocalTraining) -> None:
    from aworld_train.rollout.gateway.process_agent import _PROCESSES

    # the run's own process alone: every earlier run stopped its processes at its end
    alive = [p for p in _PROCESSES.values() if p.proc is not None and p.proc.returncode is None]
    assert len(alive) == 1, alive
    KILLED_AGENTS.append(alive[0])
    os.kill(alive[0].proc.pid, signal.SIGKILL)


def close_every_connection(listener: socket.socket) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # closed: the test is over
            return
        connection.close()


def config_for(tmp_path: Path, model_dir: Path, steps: int, **sections) -> Path:
    run = tmp_path / "run"
    base = local_config(
        run,
        model_dir,
        steps,
        rollout={
            "max_new_tokens": 64,
            "concurrency": EPISODES,
            "tool_timeout_s": 30,
            **sections.pop("rollout", {}),
        },
        data={"batch_size": 4},
        reward={"fn": "faults_support:counted_exact_answer"},
        trainer={"log_trajectories": EPISODES},
        **sections,
    )
    return write_config(tmp_path / "config", base)


def statuses(rows: list[dict], step: int) -> dict[str, int]:
    return rows[step - 1]["statuses"]


def trajectories(run: Path, step: int) -> list[dict]:
    return [
        json.loads(line) for line in (run / f"trajectories/step_{step:06d}.jsonl").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def server_and_worker_run(tmp_path_factory, tiny_model_dir):
    """One run, two workers: step 2 loses its server, step 3 a worker; steps 1 and 4 are clean."""
    config = config_for(tmp_path_factory.mktemp("faults-in-a-run"), tiny_model_dir, 4, rollout={"workers": 2})
    faults = {2: (kill_server, True), 3: (kill_worker, False)}
    return faulty_run(config, faults)


def test_a_killed_tool_server_is_restarted_and_costs_only_the_episodes_it_dropped(server_and_worker_run):
    run = server_and_worker_run
    rows, steps = run["rows"], run["steps"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert statuses(rows, 1) == {"ok": EPISODES}
    # the first sample of each task finished before the kill; the other four were in flight
    assert steps[2]["lost"] == 4
    assert statuses(rows, 2) == {"ok": 4, "tool_server_down": 4}
    down = [t for t in trajectories(run["run"], 2) if t["status"] == "tool_server_down"]
    assert all("calculate" in t["error"] for t in down), [t["error"] for t in down]
    # they carry no loss and leave their groups' baselines: the step trained on the others alone
    assert rows[1]["samples"] == 4 and rows[1]["trainable_rate"] == 0.5
    (restart,) = steps[2]["restarts"]
    assert restart.exit_code == -signal.SIGKILL and restart.attempts == 1 and restart.error is None
    assert statuses(rows, 3)["ok"] == 4 and statuses(rows, 4) == {"ok": EPISODES}  # the new process serves
    assert_flat(steps[1]["resources"], steps[2]["resources"], "tool server killed")
    record(
        fault="`env:` MCP server SIGKILL",
        where="step 2 of 4, 4 episodes between their first call and its tool call",
        run=f"restarted on its port in {restart.down_s:.1f} s (1 attempt); the step trained on the other 4",
        steps="4 of 4",
        lost=f"{statuses(rows, 2)['tool_server_down']} (`tool_server_down`) of {steps[2]['lost']} in flight",
        resources=f"{steps[1]['resources']} -> {steps[2]['resources']}",
    )


def test_a_killed_rollout_worker_costs_only_its_episodes_and_is_replaced(server_and_worker_run):
    run = server_and_worker_run
    rows, steps = run["rows"], run["steps"]
    # every episode was in flight, half of them on the killed worker
    assert steps[3]["lost"] == EPISODES
    assert statuses(rows, 3) == {"ok": 4, "worker_died": 4}
    died = [t for t in trajectories(run["run"], 3) if t["status"] == "worker_died"]
    assert all("rollout worker 1" in t["error"] and "SIGKILL" in t["error"] for t in died)
    # each task lost one of its two samples: every group keeps a baseline of one
    assert sorted(t["task_id"] for t in died) == sorted({t["task_id"] for t in trajectories(run["run"], 3)})
    assert rows[2]["samples"] == 4
    assert steps[3]["replaced"] == 1 and statuses(rows, 4) == {"ok": EPISODES}
    assert_flat(steps[1]["resources"], steps[3]["resources"], "rollout worker killed")
    assert_flat(steps[1]["resources"], steps[4]["resources"], "two faults and a clean step after")
    record(
        fault="rollout worker SIGKILL (`rollout.workers: 2`)",
        where="step 3 of 4, every episode waiting on its first call",
        run="its episodes ended `worker_died`; a new process took its place; the step completed",
        steps="4 of 4",
        lost=f"{statuses(rows, 3)['worker_died']} (`worker_died`), the killed worker's share of {steps[3]['lost']} in flight",
        resources=f"{steps[1]['resources']} -> {steps[3]['resources']} (after step 4: {steps[4]['resources']})",
    )


def test_a_killed_agent_process_fails_its_episodes_and_the_next_ones_start_a_new_one(
    tmp_path, tiny_model_dir
):
    from aworld_train.rollout.gateway.process_agent import _PROCESSES

    KILLED_AGENTS.clear()
    agent = f"{ROOT / 'examples/calculator_gateway/process_agents.py'}:sdk_agent"
    config = config_for(tmp_path, tiny_model_dir, 3, agent=agent)
    run = faulty_run(config, {2: (kill_agent_process, True)})
    rows, steps = run["rows"], run["steps"]
    assert statuses(rows, 1) == {"ok": EPISODES}
    assert steps[2]["lost"] == 4 and statuses(rows, 2) == {"ok": 4, "error": 4}
    failed = [t for t in trajectories(run["run"], 2) if t["status"] == "error"]
    assert all("exited with code -9" in t["error"] for t in failed), [t["error"] for t in failed]
    assert rows[1]["samples"] == 4
    assert statuses(rows, 3) == {"ok": EPISODES}
    (process,) = KILLED_AGENTS
    assert process.starts == 2  # the one killed, and the one the next episode started
    # the run's end stopped the one it started after the fault, and forgot it
    assert process.proc.returncode is not None and process not in _PROCESSES.values()
    assert_flat(steps[1]["resources"], steps[3]["resources"], "agent process killed")
    record(
        fault="gateway agent process SIGKILL",
        where="step 2 of 3, 4 episodes waiting on their first call",
        run="their turns failed with the exit code (status `error`); the next episode started a new process",
        steps="3 of 3",
        lost=f"{statuses(rows, 2)['error']} (`error`, exit code -9) of {steps[2]['lost']} in flight",
        resources=f"{steps[1]['resources']} -> {steps[3]['resources']}",
    )


def test_a_server_that_will_not_come_back_stops_the_run_with_its_log(tmp_path, tiny_model_dir, monkeypatch):
    from aworld_train.env.supervisor import ServerSupervisor

    monkeypatch.setattr(ServerSupervisor, "ATTEMPTS", 2)
    monkeypatch.setattr(ServerSupervisor, "FIRST_WAIT_S", 0.1)
    blockers: list[socket.socket] = []

    def kill_and_take_the_port(run: training.LocalTraining) -> None:
        server = run.envs.servers()[0]
        server.kill()
        # another program listens there now, and closes every connection: each new process fails
        # to bind the port and exits, and a tool call there gets no MCP answer
        blocker = socket.socket()
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old connections' TIME_WAIT
        blocker.bind((server.host, server.port))
        blocker.listen()
        blockers.append(blocker)
        threading.Thread(target=close_every_connection, args=(blocker,), daemon=True).start()

    config = config_for(tmp_path, tiny_model_dir, 3)
    warm_up(tmp_path / "warm-up")
    before, steps = resources(), {}
    with pytest.raises(ToolServerLost) as lost:
        faulty_run(config, {2: (kill_and_take_the_port, True)}, steps)
    for blocker in blockers:
        blocker.close()
    message = str(lost.value)
    assert "env server 'calculator'" in message and "did not start again in 2 attempt(s)" in message
    assert "env-calculator.log ends:" in message and "address already in use" in message
    assert "aworld-train run CONFIG --resume" in message
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # stopped after the step it died in
    assert (run / "checkpoints/step_000002").is_dir()  # what it learned is kept
    assert statuses([json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()], 2) == {
        "ok": 4,
        "tool_server_down": 4,
    }
    after = settled_resources(before)
    assert_flat_after_run(before, steps[1]["resources"], after, "server given up")
    record(
        fault="`env:` MCP server SIGKILL, another program then listening on its port",
        where="step 2 of 3",
        run="each new process failed to bind and exited; given up after 2 attempts; the run stopped "
        "after step 2 with the server's log tail (exit 1)",
        steps="2 of 3, checkpoint 2 saved",
        lost="4 (`tool_server_down`) of 4 in flight, then the run",
        resources=f"{steps[1]['resources']} in the run -> {after} after it (its server stopped)",
    )
