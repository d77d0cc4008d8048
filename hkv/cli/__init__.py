"""`hkv` on the command line (`hkv.cli.main`); `python -m hkv` and `python -m hkv.cli` run it."""

from hkv.cli.main import main

__all__ = ["main"]
