"""The trainer: what turns recorded trajectories into a policy update and the update into served weights.

A room of its own under the import contracts (``pyproject.toml``): it imports only the kernel
(types, config, errors, seams, io, models, algos) and nothing but the conductor imports it, so the
update can be read, tested and benchmarked without a proxy, harness, sandbox or task in sight.

- :mod:`~lego.training.items`: trajectories -> :class:`TrainItem` (segment + advantage) -> padded tensors
- :mod:`~lego.training.trainer`: :class:`Trainer`, one optimizer update (forward on the recorded ids ->
  loss -> fidelity gate -> step), composing :mod:`~lego.training.policy_model` (load, LoRA, forward,
  merged export) and :mod:`~lego.training.optim` (AdamW groups, LR schedule, clipping)
- :mod:`~lego.training.checkpoint`: atomic checkpoints and exact resume
- :mod:`~lego.training.weight_sync`: the new weights to the engine (in process, or vLLM reload / LoRA)
- :mod:`~lego.training.distributed`: ``torchrun`` + FSDP2 helpers, no-ops in one process

Nothing is imported here: the submodules pull in torch, so a caller imports the one it needs.
"""
