"""Check generated arguments against the installed vLLM's own argument parser.

`parse_vllm_args(args)` builds the parser `vllm serve` uses for engine arguments and parses
`args` with it: proof that a command hkv prints is one this vLLM accepts, not a guess.
"""

from __future__ import annotations

import argparse
import contextlib
import io

from hkv.errors import HkvError


def vllm_engine_parser() -> argparse.ArgumentParser:
    """The installed vLLM's engine-argument parser (imports vLLM: seconds, not milliseconds)."""
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM releases before the argparse helpers moved
        from vllm.utils import FlexibleArgumentParser
    return EngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm serve"))


def vllm_rejection(args: list[str]) -> str | None:
    """None when the installed vLLM accepts `args`, else its error message."""
    try:
        parse_vllm_args(args)
    except HkvError as exc:
        return str(exc)
    return None


def parse_vllm_args(args: list[str]) -> argparse.Namespace:
    """Parse `args` as vLLM would; raises `HkvError` with vLLM's own message if it refuses."""
    parser = vllm_engine_parser()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(args)
    except SystemExit:
        message = stderr.getvalue().strip().splitlines()
        raise HkvError(f"vLLM rejects the arguments: {message[-1] if message else '?'}") from None
