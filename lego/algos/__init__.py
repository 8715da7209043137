"""The RL objective as pure functions: advantages, policy losses (GSPO, token-level PPO) and the
rollout–train fidelity metrics. The trainer (lego.conductor.trainer) calls these directly."""

from lego.algos.advantages import group_advantages
from lego.algos.fidelity import PEARSON, FidelityGate, fidelity_metrics
from lego.algos.losses import (
    POLICY_LOSSES,
    episode_log_ratio,
    get_policy_loss,
    gspo_policy_loss,
    k3_kl,
    policy_loss_for,
    token_policy_loss,
    token_weights,
)

__all__ = [
    "PEARSON",
    "POLICY_LOSSES",
    "FidelityGate",
    "episode_log_ratio",
    "fidelity_metrics",
    "get_policy_loss",
    "group_advantages",
    "gspo_policy_loss",
    "k3_kl",
    "policy_loss_for",
    "token_policy_loss",
    "token_weights",
]
