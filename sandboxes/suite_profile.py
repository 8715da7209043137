"""Property-based tests under a grader: the same examples every run, no deadline, no example database.

Hypothesis draws fresh random examples on every run and fails a test whose example takes longer than
its deadline (200 ms by default). Both make a grade depend on the run rather than the code: a loaded
grading machine (two sandboxes side by side, other rollouts beside them) pushes an honest example
past its deadline, and a property that fails only on rare inputs passes one grade of the same diff
and fails the next, so the same diff would not get the same reward. Hypothesis' answer for CI is a
settings profile; lego loads one in every run it makes of a task's suite, with the settings of
Hypothesis' own ``ci`` profile: ``derandomize`` (the examples follow from the test alone),
``deadline=None``, no example database (nothing read from or written to the repo), and the
``too_slow`` health check suppressed; and no shrinking (nor explaining) of a failing example. A
grade needs each test's outcome, which shrinking does not change, and a failing fix fails many of
them: shrinking each failure cost a property test with 0.3 s examples 35 s of a 36 s run.

Where it runs: the grader's bootstrap executes this text after the repo's import roots are first on
``sys.path`` and before pytest starts (:mod:`lego.sandboxes.grading`); the task factory's suite runs
load it as the pytest plugin ``lego_suite_profile`` (:func:`lego.tasks.environments.suite_invocation`),
which pytest imports before any conftest. So a profile the project loads itself (in its conftest, or
with ``--hypothesis-profile`` in its addopts) still wins, as on its developers' machines, and so do a
test's own ``@settings``. A run whose environment has no Hypothesis does not import it.

It runs with the task's interpreter (as old as Python 3.6 in SWE-bench images) and imports nothing of
lego. Nothing here is a defence: the code under test can change these settings, which only changes
which examples its own tests try.
"""


def _load_profile():
    try:
        import importlib.util

        if importlib.util.find_spec("hypothesis") is None:
            return
        from hypothesis import HealthCheck, Phase, settings

        settings.register_profile(
            "lego-grade",
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
            phases=[phase for phase in Phase if phase.name not in ("shrink", "explain")],
        )
        settings.load_profile("lego-grade")
    except Exception:  # an old or broken Hypothesis: its own defaults, as without lego
        pass


if __name__ == "lego_suite_profile":  # as the plugin or the grader's prelude; never when lego imports it
    _load_profile()
