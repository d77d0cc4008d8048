"""The policy registry: every policy is found by name, imported on first use.

    register_policy("lru", "hkv.policies.lru", "LRUPolicy")
    make_policy("lru", capacity_blocks=1024)

Errors speak of the policy name and its fields; callers that take the name from a flag (the
CLI, `hkv flags`, vLLM's connector config) say which flag.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from hkv.errors import HkvError
from hkv.policies.base import EvictionPolicy

_REGISTRY: dict[str, Callable[[], type[EvictionPolicy]]] = {}


def register_policy(name: str, module_path: str, class_name: str) -> None:
    """Register `module_path.class_name` under `name`; imported on first use."""
    if name in _REGISTRY:
        raise HkvError(f"policy {name!r} is already registered")

    def loader() -> type[EvictionPolicy]:
        return getattr(importlib.import_module(module_path), class_name)

    _REGISTRY[name] = loader


def policy_names(*, online_only: bool = False) -> list[str]:
    """Registered policy names, in registration order; `online_only` leaves out the oracles."""
    if online_only:
        return [name for name in _REGISTRY if not get_policy_class(name).offline]
    return list(_REGISTRY)


def get_policy_class(name: str) -> type[EvictionPolicy]:
    """The class registered as `name`; `HkvError` listing the valid names on a miss."""
    loader = _REGISTRY.get(name)
    if loader is None:
        raise HkvError(f"policy: unknown policy {name!r}; valid: {', '.join(_REGISTRY)}")
    return loader()


def make_policy(name: str, capacity_blocks: int, **context_and_params: Any) -> EvictionPolicy:
    """Build policy `name`, passing it the keyword arguments it declares as fields.

    Callers may offer run context to every policy (`cost_model=`, `config=`, `future=`): each
    policy takes the ones listed in its `context_fields` and ignores the rest. Any other keyword
    is a hyperparameter and must be one of the policy's fields.
    """
    cls = get_policy_class(name)
    field_names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in context_and_params.items():
        if key in cls.context_fields or key in field_names:
            kwargs[key] = value
        elif key not in ("cost_model", "config", "future"):
            valid = ", ".join(sorted(field_names - {"capacity_blocks", *cls.context_fields}))
            raise HkvError(f"{name}: unknown hyperparameter {key!r}; valid: {valid or 'none'}")
    return cls(capacity_blocks, **kwargs)


def online_policy_class(name: str, *, runner: str) -> type[EvictionPolicy]:
    """The class of `name` if it can run without knowing the future (`offline` False); the
    one place that says why an offline yardstick such as `belady` cannot run in `runner`.
    The message starts with the name: callers prefix the field or flag it came from."""
    cls = get_policy_class(name)
    if cls.offline:
        online = ", ".join(policy_names(online_only=True))
        raise HkvError(
            f"{name!r} is an offline yardstick that needs the future requests; "
            f"{runner} cannot run it. Use an online policy: {online}"
        )
    return cls
