"""Rank 0 drives, the other ranks follow: `lego train` under ``torchrun``.

Rank 0 alone runs the rollouts (the proxy, the harnesses, the sandboxes, grading, the engine);
every rank holds an FSDP2 shard of the trainer (:mod:`lego.training.distributed`). Between steps
rank 0 tells the followers what to do through a :class:`StepChannel`, one typed command at a time,
then takes part in that command itself, so every rank enters the same collectives in the same order:

- :class:`Train` — one step (``Trainer.train_step``) on the step's whole batch. Every rank gets
  every item, not a shard of them: the loss weights each token by its episode's share of the
  *whole* batch and GSPO's sequence ratio pools an episode over all its segments, so each rank needs
  the global batch to compute its share; each rank then runs an interleaved share of the
  micro-batches and FSDP2's reduce-scatter adds the gradients (the trainer's docstring says how).
- :class:`Push` — the full weights are gathered from the shards (a collective); rank 0 alone
  delivers them to the engine, the followers drop their copy.
- :class:`Save` / :class:`Restore` — a checkpoint gathers (or reshards) weights and optimizer state
  on every rank; only rank 0 writes. Every rank reads the same checkpoint directory to restore.
- :class:`Stop` — the run ended (finished, interrupted or failed on rank 0): followers return.

Commands travel over the gloo control group (a day's timeout: followers wait there while rank 0
runs rollouts); the training collectives use the default group. A follower that dies is named:
rank 0 knows each rank's host and pid from the start, and a collective that fails, or torchrun's
SIGTERM when it sees a worker exit, becomes :class:`~lego.errors.RankFailedError` naming the rank.
In one process the channel sends nothing and each call is the trainer's own.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch.distributed as dist

from lego.errors import LegoError, RankFailedError
from lego.training import distributed as dist_utils
from lego.training.checkpoint import restore_checkpoint, save_checkpoint
from lego.training.items import TrainItem

if TYPE_CHECKING:
    from lego.training.trainer import Trainer
    from lego.training.weight_sync import WeightSync

__all__ = ["Command", "Push", "Restore", "Save", "StepChannel", "Stop", "Train", "follow"]

STOP_WAIT_S = 10.0
"""How long rank 0 waits to hand ``Stop`` over; a follower stuck in a training collective (rank 0
was interrupted inside an update) never takes it, and torchrun ends that follower when rank 0 exits."""

LOST_WAIT_S = 2.0
"""After a failed collective, how long to look for the follower process that died (its exit may
lag the broken connection by a moment)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Train:
    """One training step on the step's whole batch (``policy_version`` as ``Trainer.train_step`` takes it)."""

    items: list[TrainItem]
    policy_version: int | None = None


@dataclass(frozen=True)
class Push:
    """Gather the full weights for rank 0 to deliver to the engine."""


@dataclass(frozen=True)
class Save:
    """Checkpoint into ``run_dir``/checkpoints (rank 0 writes)."""

    run_dir: str


@dataclass(frozen=True)
class Restore:
    """Restore the checkpoint directory ``path`` on every rank."""

    path: str


@dataclass(frozen=True)
class Stop:
    """The run is over: followers return from :func:`follow`."""


Command = Train | Push | Save | Restore | Stop


@dataclass(frozen=True)
class _Peer:
    host: str
    pid: int


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (reaped, or a zombie waiting for torchrun to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return False


class StepChannel:
    """Rank 0's commands to the follower ranks, and rank 0's side of each (send, then take part).

    :meth:`open` on every rank (a collective: it builds the control group and learns each rank's
    host and pid); :meth:`solo` for one process, where nothing is sent."""

    def __init__(self, info: dist_utils.DistInfo, group: Any, peers: Sequence[_Peer]) -> None:
        self.info = info
        self.group = group
        self.peers = list(peers)
        self.saved_step = 0
        """The newest step this channel saved or restored: where a ``--resume`` continues."""

    @classmethod
    def solo(cls) -> StepChannel:
        return cls(dist_utils.DistInfo(), None, [_Peer(socket.gethostname(), os.getpid())])

    @classmethod
    def open(cls) -> StepChannel:
        info = dist_utils.current()
        if info.world_size == 1:
            return cls.solo()
        group = dist_utils.control_group()
        peers: list[Any] = [None] * info.world_size
        dist.all_gather_object(peers, _Peer(socket.gethostname(), os.getpid()), group=group)
        return cls(info, group, peers)

    @property
    def is_main(self) -> bool:
        return self.info.is_main

    # ---- the followers' side ------------------------------------------------------------------

    def receive(self) -> Command:
        """The next command from rank 0 (waits up to the control group's timeout)."""
        cmd = dist_utils.broadcast_from_main(None, self.group)
        if not isinstance(cmd, Train | Push | Save | Restore | Stop):
            raise TypeError(f"rank {self.info.rank} received {type(cmd).__name__}, not a step command")
        return cmd

    # ---- rank 0's side ------------------------------------------------------------------------

    def send(self, cmd: Command) -> None:
        """Hand ``cmd`` to every follower (nothing in one process)."""
        if self.info.world_size > 1:
            self._guard(lambda: dist_utils.broadcast_from_main(cmd, self.group))

    def train_step(self, trainer: Trainer, items: Sequence[TrainItem], policy_version: int | None) -> dict[str, float]:
        self.send(Train(list(items), policy_version))
        return self._guard(lambda: trainer.train_step(items, policy_version=policy_version))

    def push(self, weights: WeightSync, trainer: Trainer) -> int:
        """The engine serves the trainer's weights (gathered from every rank's shard); returns its version."""
        self.send(Push())
        return self._guard(lambda: weights.push(trainer))

    def save(self, trainer: Trainer, run_dir: Path, extra: dict[str, Any], export_merged: bool) -> Path:
        self.send(Save(str(run_dir)))
        path = self._guard(lambda: save_checkpoint(trainer, run_dir, extra=extra, export_merged=export_merged))
        self.saved_step = trainer.step_count
        return path

    def restore(self, trainer: Trainer, path: Path) -> dict[str, Any]:
        self.send(Restore(str(path)))
        extra = self._guard(lambda: restore_checkpoint(trainer, path))
        self.saved_step = trainer.step_count
        return extra

    def stop(self) -> bool:
        """Tell the followers the run is over; whether every one took it. Never raises, and gives up
        after :data:`STOP_WAIT_S`: a follower that is gone, or stuck, is torchrun's to end once rank 0 exits."""
        if self.info.world_size == 1:
            return True
        handed = threading.Event()

        def hand_over() -> None:
            try:
                dist_utils.broadcast_from_main(Stop(), self.group)
            except (RuntimeError, dist.DistError):
                return
            handed.set()

        worker = threading.Thread(target=hand_over, name="stop-followers", daemon=True)
        worker.start()
        worker.join(STOP_WAIT_S)
        return handed.is_set()

    def lost_rank(self, wait_s: float = 0.0) -> int | None:
        """The first follower on this host whose process has exited, looking for up to ``wait_s``."""
        host = socket.gethostname()
        deadline = time.monotonic() + wait_s
        while True:
            for rank, peer in enumerate(self.peers[1:], start=1):
                if peer.host == host and _gone(peer.pid):
                    return rank
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _guard(self, fn: Callable[[], T]) -> T:
        """``fn()``; a collective broken by a follower's death becomes :class:`RankFailedError`."""
        try:
            return fn()
        except (RuntimeError, dist.DistError) as exc:
            if self.info.world_size == 1:
                raise
            rank = self.lost_rank(LOST_WAIT_S)
            if rank is None:
                raise
            raise RankFailedError(rank, self.saved_step, "its process exited during a collective") from exc

    @contextmanager
    def watch(self) -> Iterator[None]:
        """On rank 0 under torchrun: SIGTERM (torchrun's, when it sees a worker exit) raises
        :class:`RankFailedError` naming the lost rank; any other SIGTERM stops the run as Ctrl-C does."""
        if self.info.world_size == 1 or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_term(signum: int, frame: Any) -> None:
            rank = self.lost_rank(LOST_WAIT_S)
            if rank is not None:
                raise RankFailedError(rank, self.saved_step, "its process exited; torchrun is stopping the run")
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, on_term)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


def _obey(cmd: Train | Push | Save | Restore, trainer: Trainer) -> None:
    match cmd:
        case Train(items, policy_version):
            trainer.train_step(items, policy_version=policy_version)
        case Push():
            trainer.engine_state_dict()  # the gather is a collective; the weights are rank 0's to deliver
        case Save(run_dir):
            save_checkpoint(trainer, run_dir)  # the gathers are collectives; rank 0 writes
        case Restore(path):
            restore_checkpoint(trainer, path)


def follow(channel: StepChannel, trainer: Trainer) -> int:
    """A follower's loop: carry out rank 0's commands on this rank's shard until :class:`Stop`;
    returns how many were carried out.

    A lego error in a command (the fidelity gate, an incompatible checkpoint) is raised on every
    rank alike, since each decides on the same gathered numbers or the same files; rank 0 reports
    it and sends ``Stop``, so the follower waits for that instead of leaving. Any other error ends
    the follower, and rank 0 then names it (:class:`RankFailedError`)."""
    done = 0
    while True:
        cmd = channel.receive()
        if isinstance(cmd, Stop):
            return done
        try:
            _obey(cmd, trainer)
        except LegoError:
            continue
        done += 1
