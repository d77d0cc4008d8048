"""hkv settings for the policies inside vLLM: the CPU tier's part of an `OffloadSpec`.

A policy reads `config` (`hkv_config`), `policy_params` (`hkv_policy_params`, its
hyperparameters: `{"tail_first": true}` for `hkv_bip`; an unknown one fails at engine start with
the policy's valid ones) and `block_tokens` through `offload_spec.read_policy_settings`, the
reader of what `hkv flags` writes, with its rules: an `hkv_config` that names another policy
than `eviction_policy`, or another size than `cpu_bytes_to_use`, fails at engine start. From,
first found first:

1. the connector's extra config as the spec building the policy holds it (`spec_settings`); its
   block size, when the config gives none, is the spec's own chunk size;
2. the current vLLM config's connector config, if one is set;
3. the environment, `HKV_CONFIG` and `HKV_POLICY_PARAMS` (JSON) and `HKV_BLOCK_TOKENS`, for
   scripts that build vLLM's manager themselves; hkv's own code uses `connector_extra_config`.

How a spec hands its extra config over: vLLM builds the CPU tier's policy with its capacity
alone, and no current vLLM config is set in the scheduler then. hkv's specs
(`hkv.integrations.vllm.spec`, which vLLM loads by `spec_name` and `spec_module_path`, its
extension point for specs in 0.26, 0.32 and 0.33) build their manager inside `spec_settings`.
`hkv flags` names hkv's specs for every hkv policy (`HkvOffloadingSpec` for a CPU tier alone,
`HkvTieringOffloadingSpec` with a disk tier). A config written by hand that names vLLM's own
`CPUOffloadingSpec` (or no spec, as commands `hkv flags` printed before did) is served by
`follow_offloading_spec`, which the `vllm.general_plugins` entry point calls: it wraps that
spec's `get_manager` the same way. vLLM's `TieringOffloadingSpec` overrides `get_manager` and is
not wrapped: its CPU tier's hkv policy reads nothing but the environment.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.models.model_spec import ModelSpec
from hkv.planning.offload_spec import read_policy_settings

ENV_KEYS = {
    "hkv_config": ("HKV_CONFIG", '{"offload_strategy": "cost_aware"}'),
    "hkv_policy_params": ("HKV_POLICY_PARAMS", '{"tail_first": true}'),
    "block_size": ("HKV_BLOCK_TOKENS", "16"),
}
"""Connector keys, and the variables a script without a connector config may set instead."""


def adapter_settings() -> dict[str, Any]:
    """`config`, `policy_params`, `block_tokens` and `cost_model`, each where it is given."""
    extra = _connector_extra_config()
    for key, (name, example) in ENV_KEYS.items():
        if extra.get(key) is None and os.environ.get(name):
            extra[key] = _env_value(name, example)
    settings = read_policy_settings(extra)
    if (model := _model_cost()) is not None:
        settings["cost_model"] = model
    return settings


def _env_value(name: str, example: str) -> Any:
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


@contextlib.contextmanager
def connector_extra_config(extra: Mapping[str, Any]) -> Iterator[None]:
    """While it lasts, hkv policies built in this context read `extra` as the connector's
    extra config (a script building vLLM's manager itself: `{"block_size": 32}`)."""
    token = _SPEC_EXTRA.set(dict(extra))
    try:
        yield
    finally:
        _SPEC_EXTRA.reset(token)


def spec_settings(spec: Any) -> contextlib.AbstractContextManager[None]:
    """`connector_extra_config` of an offloading spec: its `extra_config`, and its chunk size
    (tokens of the largest group's block x blocks a chunk) as `block_size` if that is not set."""
    extra = dict(getattr(spec, "extra_config", None) or {})
    groups = getattr(spec, "tokens_per_block", None)
    blocks = getattr(spec, "blocks_per_chunk", None)
    if extra.get("block_size") is None and groups and isinstance(blocks, int):
        extra["block_size"] = max(groups) * blocks
    return connector_extra_config(extra)


SPEC_MODULES = ("vllm.v1.kv_offload.cpu.spec", "vllm.v1.kv_offload.cpu_spec")
"""Where vLLM releases keep `CPUOffloadingSpec` (0.26 to 0.33; older)."""
_WRAPPED = "_hkv_passes_extra_config"


def follow_offloading_spec() -> bool:
    """Let policies built by vLLM's own `CPUOffloadingSpec.get_manager` read that spec's extra
    config (`spec_settings`). Idempotent; False where this vLLM has no such spec (nothing is
    changed then)."""
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
    """`get_manager` with the spec's extra config readable by `adapter_settings` meanwhile."""

    @functools.wraps(get_manager)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        with spec_settings(self):
            return get_manager(self, *args, **kwargs)

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
