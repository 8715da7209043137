"""training.update_nice: the asynchronous loop's update in a thread of its own, at a lower priority."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lego.conductor.async_train import UpdateThread


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_update_runs_at_the_nice_value_and_nothing_else_does() -> None:
    base = _nice_of_this_thread()
    updater = UpdateThread(7)
    try:
        seen = updater.run(lambda: (_nice_of_this_thread(), threading.current_thread().name))
        assert seen[0] == min(19, base + 7) and seen[1].startswith("update") and updater.niced
        assert _nice_of_this_thread() == base  # the caller, and every thread it starts, keep theirs
        other = threading.Thread(target=lambda: results.append(_nice_of_this_thread()))
        results: list[int] = []
        other.start()
        other.join()
        assert results == [base]
        with pytest.raises(ValueError, match="boom"):  # an update's error reaches the loop as it did
            updater.run(lambda: (_ for _ in ()).throw(ValueError("boom")))
    finally:
        updater.close()


def test_nice_0_runs_the_update_on_the_calling_thread() -> None:
    updater = UpdateThread(0)
    assert updater.run(threading.current_thread) is threading.current_thread()
    updater.close()


def test_ctrl_c_while_waiting_lets_the_update_finish_first() -> None:
    updater = UpdateThread(5)
    finished: list[float] = []

    def update() -> None:
        time.sleep(0.5)
        finished.append(time.monotonic())

    def interrupt() -> None:
        time.sleep(0.1)
        import _thread

        _thread.interrupt_main()  # Ctrl-C, as the main thread receives it

    threading.Thread(target=interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        updater.run(update)
    raised = time.monotonic()
    assert finished and finished[0] <= raised  # the checkpoint the update writes is whole
    updater.close()
