"""The hyperparameters a server's hkv policy is given (`hkv_policy_params`), checked where they
are written (`OffloadSpec`, `hkv flags --policy-param`) rather than when vLLM starts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hkv.errors import HkvError, shown
from hkv.policies import make_policy

VLLM_NATIVE_POLICIES = ("lru", "arc")
"""Policies vLLM's CPU tier ships; every other name is served by hkv's adapter."""
CONTEXT = frozenset({"cost_model", "config", "future"})
"""What the server hands every policy (`make_policy`'s context), never a hyperparameter."""


def check_policy_params(policy: str, params: Any, name: str = "policy_params") -> None:
    """`params` (given as `name`) are hyperparameters of hkv policy `policy` with values it
    takes (the policy, made once with them, checks each), in JSON: a server refuses them at its
    start otherwise. vLLM's own policies take none."""
    if not isinstance(params, Mapping):
        raise HkvError(f"{name}: got {shown(params)}; expected an object of name: value")
    if params and policy in VLLM_NATIVE_POLICIES:
        raise HkvError(
            f"{name}: vLLM's own {policy!r} takes no hkv hyperparameters; drop them or name an "
            "hkv policy"
        )
    if not params:
        return
    context = sorted(set(params) & CONTEXT)
    if context:
        raise HkvError(
            f"{name}: {context[0]!r} is what the server hands the policy, not a hyperparameter; "
            "drop it"
        )
    try:
        json.dumps(dict(params), allow_nan=False)
    except (TypeError, ValueError):
        raise HkvError(
            f"{name}: got {shown(dict(params))}; expected JSON values (numbers, strings, "
            "true/false, lists)"
        ) from None
    try:
        make_policy(policy, 1, **params)
    except HkvError as exc:
        raise HkvError(f"{name}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a value of a type the policy's check did not expect
        raise HkvError(f"{name}: {policy} refused {shown(dict(params))} ({exc})") from None
