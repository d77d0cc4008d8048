"""hkv's one native module, `hkv.policies._shadows` (auto's shadow tiers in C).

Everything else is in pyproject.toml. The module is optional: where it cannot be built, hkv runs
the same decisions in Python (hkv/policies/native.py; `hkv doctor` says which).
"""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("hkv/policies/_native")
SOURCES = ["module.c", "tier.c", "util.c", "lru.c", "arc.c", "s3fifo.c", "prefix.c"]

setup(
    ext_modules=[
        Extension(
            "hkv.policies._shadows",
            sources=[str(NATIVE / name) for name in SOURCES],
            depends=[str(NATIVE / "shadow.h")],
            # no fused multiply-add: the prefix experts' float priorities must round as Python's
            extra_compile_args=["-O2", "-ffp-contract=off", "-std=c11"],
            optional=True,
        )
    ]
)
