"""hkv's native modules: `hkv.policies._shadows` (auto's shadow tiers in C) and
`hkv.storage._slots` (the disk tier's slot reads and writes without the GIL).

Everything else is in pyproject.toml. Both are optional: where they cannot be built, hkv runs
the same decisions in Python (hkv/policies/native.py, hkv/storage/slot_io.py; `hkv doctor` says
which).
"""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("hkv/policies/_native")
SOURCES = ["module.c", "tier.c", "util.c", "lru.c", "arc.c", "s3fifo.c", "prefix.c", "leader.c",
           "predictive.c", "worker.c", "adapter.c"]

setup(
    ext_modules=[
        Extension(
            "hkv.policies._shadows",
            sources=[str(NATIVE / name) for name in SOURCES],
            depends=[str(NATIVE / name) for name in ("shadow.h", "leader.h", "worker.h", "adapter.h")],
            # no fused multiply-add: the prefix experts' float priorities must round as Python's
            extra_compile_args=["-O2", "-ffp-contract=off", "-std=c11", "-fvisibility=hidden"],
            optional=True,
        ),
        Extension(
            "hkv.storage._slots",
            sources=["hkv/storage/_native/slots.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            libraries=["dl"],  # dlopen of the system's zlib for crc32 (in libc since glibc 2.34)
            optional=True,
        ),
    ]
)
