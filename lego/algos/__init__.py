"""The RL objective as pure functions: advantages, policy losses (GSPO, token-level PPO) and the
rollout–train fidelity metrics. The trainer (lego.training.trainer) calls these directly."""

from lego.algos.advantages import group_advantages
from lego.algos.fidelity import PEARSON, FidelityGate, fidelity_metrics
from lego.algos.losses import (
    POLICY_LOSSES,
    LossInputs,
    PolicyLoss,
    behaviour_log_weight,
    behaviour_logp,
    episode_log_ratio,
    episode_log_ratio_from_sums,
    episode_log_ratio_sums,
    get_policy_loss,
    gspo_log_ratio,
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
    "LossInputs",
    "PolicyLoss",
    "behaviour_log_weight",
    "behaviour_logp",
    "episode_log_ratio",
    "episode_log_ratio_from_sums",
    "episode_log_ratio_sums",
    "fidelity_metrics",
    "get_policy_loss",
    "group_advantages",
    "gspo_log_ratio",
    "gspo_policy_loss",
    "k3_kl",
    "policy_loss_for",
    "token_policy_loss",
    "token_weights",
]
