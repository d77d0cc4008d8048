"""hkv settings for the policies inside vLLM.

From the running vLLM's connector config (`hkv_config`, `hkv_policy_params`, `block_size`) or
else the environment (`HKV_CONFIG` and `HKV_POLICY_PARAMS` as JSON, `HKV_BLOCK_TOKENS`), plus a
cost model for the served model. `hkv_policy_params` are the policy's hyperparameters
(`{"tail_first": true}` for `hkv_bip`); an unknown one fails at engine start with the policy's
valid ones.

Where the connector config comes from: vLLM's CPU offloading spec builds the manager, and with it
the policy, from its `extra_config`, but passes the policy nothing but its capacity, and no
"current vLLM config" is set in the scheduler then. `follow_offloading_spec()` (called by the
`vllm.general_plugins` entry point in every vLLM process) wraps the spec's `get_manager` so that
while it builds the manager the policy reads that spec's `extra_config`. Without it (vLLM's
plugins turned off) the current vLLM config, if any, then the environment, are read.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import json
import os
from typing import Any

from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.planning.model_spec import ModelSpec


def adapter_settings() -> dict[str, Any]:
    """`config`, `policy_params`, `block_tokens` and `cost_model`, each where it is given."""
    extra = _connector_extra_config()
    settings: dict[str, Any] = {}
    raw = extra.get("hkv_config")
    if raw is None and os.environ.get("HKV_CONFIG"):
        raw = _env_json("HKV_CONFIG", '{"offload_strategy": "cost_aware"}')
    if raw:
        settings["config"] = HybridKVCacheConfig.from_dict(raw, source="hkv_config")
    params = extra.get("hkv_policy_params")
    if params is None and os.environ.get("HKV_POLICY_PARAMS"):
        params = _env_json("HKV_POLICY_PARAMS", '{"tail_first": true}')
    if params:
        if not isinstance(params, dict):
            raise HkvError(f"hkv_policy_params: got {params!r}; expected an object of name: value")
        settings["policy_params"] = params
    block_tokens = extra.get("block_size") or os.environ.get("HKV_BLOCK_TOKENS")
    if block_tokens:
        settings["block_tokens"] = int(block_tokens)
    if (model := _model_cost()) is not None:
        settings["cost_model"] = model
    return settings


def _env_json(name: str, example: str) -> Any:
    try:
        return json.loads(os.environ[name])
    except json.JSONDecodeError as exc:
        raise HkvError(f"{name}: not JSON ({exc}); e.g. '{example}'") from None


def _current_vllm_config() -> Any:
    try:
        from vllm.config import get_current_vllm_config_or_none
    except ImportError:
        return None
    return get_current_vllm_config_or_none()


_SPEC_EXTRA: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "hkv_offloading_spec_extra_config", default=None
)
SPEC_MODULES = ("vllm.v1.kv_offload.cpu.spec", "vllm.v1.kv_offload.cpu_spec")
"""Where vLLM releases keep `CPUOffloadingSpec` (0.32 and 0.33; older)."""
_WRAPPED = "_hkv_passes_extra_config"


def follow_offloading_spec() -> bool:
    """Let policies built by vLLM's `CPUOffloadingSpec.get_manager` read that spec's
    `extra_config` (the connector's `kv_connector_extra_config`). Idempotent; False where this
    vLLM has no such spec (nothing is changed then)."""
    for name in SPEC_MODULES:
        try:
            spec_cls = importlib.import_module(name).CPUOffloadingSpec
        except Exception:  # absent in this release, or failing to import on this machine:
            continue  # a plugin must not stop vLLM; the current config and env still apply
        if not getattr(spec_cls.get_manager, _WRAPPED, False):
            spec_cls.get_manager = _passing_extra_config(spec_cls.get_manager)
        return True
    return False


def _passing_extra_config(get_manager: Any) -> Any:
    """`get_manager` with the spec's `extra_config` readable by `adapter_settings` meanwhile."""

    @functools.wraps(get_manager)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _SPEC_EXTRA.set(dict(getattr(self, "extra_config", None) or {}))
        try:
            return get_manager(self, *args, **kwargs)
        finally:
            _SPEC_EXTRA.reset(token)

    setattr(wrapped, _WRAPPED, True)
    return wrapped


def _connector_extra_config() -> dict[str, Any]:
    if (extra := _SPEC_EXTRA.get()) is not None:
        return dict(extra)
    transfer = getattr(_current_vllm_config(), "kv_transfer_config", None)
    return dict(getattr(transfer, "kv_connector_extra_config", None) or {})


def _model_cost() -> CostModel | None:
    """A cost model for the served model when vLLM's config is at hand, else None (default)."""
    model_config = getattr(_current_vllm_config(), "model_config", None)
    hf_config = getattr(model_config, "hf_config", None)
    if hf_config is None:
        return None
    try:
        spec = ModelSpec.from_hf_config(hf_config.to_dict(), name="served")
    except HkvError:
        return None
    return CostModel(spec)
