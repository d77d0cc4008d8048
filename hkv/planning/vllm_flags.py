"""The real vLLM flags in an article-style command: which are known, and their checks.

`hkv.planning.flags` translates the article's hybrid flags; the flags vLLM really has go
through this module's `RealFlagChecks` (a mixin of the translator): copied as given (unknown
ones with a warning), legacy ones dropped with the reason, and contradictions raised as
`FlagConflict`.

Block-size rule (read from the attention backends' `get_supported_kernel_block_sizes` in vLLM
0.32): FlashAttention and Triton take any multiple of 16, FlashInfer 16, 32 or 64, FlashMLA
exactly 64, the CPU backend a multiple of 32. vLLM picks FlashMLA for MLA models and
FlashAttention for the rest on Hopper, so those rules apply when no backend is named.

fp8 KV with cold-tier quantization (decided here): refused. fp8 blocks are already 8-bit;
quantizing them again to q8/q6/q4 stacks two lossy steps whose combined error hkv has not
measured, and the cold formats are defined on 16-bit input. With `--kv-cache-dtype fp8` the cold
tier must use a passthrough format (`fp16`/`bf16`), which then stores the fp8 bytes unchanged.
"""

from __future__ import annotations

import shlex
from typing import Any

from hkv.errors import FlagConflict, HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.planning.plan_inputs import tensor_parallel_problem, tensor_parallel_sizes

BACKEND_BLOCK_RULES: dict[str, tuple[str, Any]] = {
    "FLASH_ATTN": ("a multiple of 16", lambda b: b % 16 == 0),
    "TRITON_ATTN": ("a multiple of 16", lambda b: b % 16 == 0),
    "FLASHINFER": ("16, 32 or 64", lambda b: b in (16, 32, 64)),
    "FLASHMLA": ("exactly 64", lambda b: b == 64),
    "CPU_ATTN": ("a multiple of 32", lambda b: b % 32 == 0),
}

HYBRID_FLAGS = (
    "--enable-hybrid-kv-cache",
    "--hybrid-kv-cache-cpu-offload-size",
    "--hybrid-kv-cache-cpu-offload-percent",
    "--hybrid-kv-cache-policy",
    "--hybrid-kv-cache-cost-weights",
    "--hybrid-kv-cache-config",
)

BOOLEAN_FLAGS = {
    "--enable-hybrid-kv-cache",
    "--trust-remote-code",
    "--enforce-eager",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--enable-chunked-prefill",
    "--disable-log-requests",
    "--enable-expert-parallel",
    "--enable-auto-tool-choice",
}

CHECKED_VLLM_FLAGS = {
    "--model",
    "--tensor-parallel-size",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--kv-cache-dtype",
    "--block-size",
    "--quantization",
    "--attention-backend",
    "--dtype",
}


class RealFlagChecks:
    """The translator's handling of real vLLM flags. It uses the translator's `flags`, `out`,
    `value`, `number` and `spec`."""

    def copy_real_flags(self) -> None:
        """Every flag that is neither hybrid nor legacy goes through as given, the model first."""
        if model := self.value("--model"):
            spec = self.spec()
            self.out.vllm_args += ["--model", spec.hub_id if spec and spec.hub_id else model]
        for flag, value in self.flags.items():
            if flag in (*HYBRID_FLAGS, "--swap-space", "--load-format", "--model"):
                continue
            if flag not in CHECKED_VLLM_FLAGS and flag not in BOOLEAN_FLAGS:
                self.out.warnings.append(f"{flag}: passed through to vLLM unchecked by hkv")
            self.out.vllm_args += [flag] if value is None else [flag, value]

    def drop_legacy_flags(self) -> None:
        if "--swap-space" in self.flags:
            self.out.dropped.append(
                {
                    "flag": f"--swap-space {self.value('--swap-space')}",
                    "reason": "V0-engine CPU swap space for preempted sequences; the V1 engine "
                    "recomputes preempted requests instead and vLLM 0.33 has no such flag. "
                    "The CPU tier above is what keeps KV in host RAM now",
                }
            )
        load_format = self.value("--load-format")
        if load_format is None:
            return
        if load_format.lower() in ("awq", "gptq"):
            quant = self.value("--quantization")
            if quant is not None and quant != load_format.lower():
                raise FlagConflict(
                    "--load-format",
                    "--quantization",
                    f"--load-format {load_format} implies AWQ weights, --quantization says "
                    f"{quant!r}",
                )
            self.out.dropped.append(
                {
                    "flag": f"--load-format {load_format}",
                    "reason": f"{load_format} is a quantization method, not a load format; "
                    f"replaced by --quantization {load_format.lower()} (the checkpoint must "
                    "already hold AWQ weights)",
                }
            )
            if quant is None:
                self.out.vllm_args += ["--quantization", load_format.lower()]
        else:
            self.out.vllm_args += ["--load-format", load_format]

    def check_block_size(self) -> None:
        block = self.number("--block-size", int)
        if block is None:
            return
        spec = self.spec()
        named = self.value("--attention-backend")
        is_mla = spec is not None and spec.is_mla
        backend = named or ("FLASHMLA" if is_mla else "FLASH_ATTN")
        rule = BACKEND_BLOCK_RULES.get(backend.upper())
        if rule is None:
            self.out.warnings.append(f"--attention-backend {backend}: block-size rule unknown")
            return
        text, ok = rule
        if ok(block):
            return
        chosen = "" if named else f" (vLLM's choice for {'MLA' if is_mla else 'this'} model)"
        raise FlagConflict(
            "--block-size",
            "--model" if is_mla and not named else "--attention-backend",
            f"{backend}{chosen} needs a block size that is {text}; got {block}",
        )

    def check_tensor_parallel(self) -> None:
        tp = self.number("--tensor-parallel-size", int)
        spec = self.spec()
        if tp is None or spec is None:
            return
        problem = tensor_parallel_problem(spec, tp)
        if problem:
            sizes = ", ".join(map(str, tensor_parallel_sizes(spec)))
            raise FlagConflict(
                "--tensor-parallel-size", "--model", f"{problem}; use one of {sizes}"
            )

    def check_fp8_with_cold_quantization(self, config: HybridKVCacheConfig | None) -> None:
        dtype = self.value("--kv-cache-dtype") or "auto"
        if config is None or not dtype.startswith("fp8") or not config.quantized_modalities:
            return
        lossy = ", ".join(
            f"{m}={config.modality_configs[m].quantization}" for m in config.quantized_modalities
        )
        raise FlagConflict(
            "--kv-cache-dtype",
            "--hybrid-kv-cache-config",
            f"fp8 KV blocks would be quantized a second time in the cold tier ({lossy}); use "
            "quantization fp16/bf16 (passthrough) with fp8 KV, or --kv-cache-dtype auto",
        )


def serve_command(vllm_args: list[str], env: dict[str, str] | None = None) -> str:
    """`vllm serve MODEL ...` from engine arguments that hold `--model MODEL`, after `NAME=value`
    for each variable of `env` (the environment the server needs)."""
    args = list(vllm_args)
    model: list[str] = []
    if "--model" in args:
        at = args.index("--model")
        model = args[at + 1 : at + 2]
        del args[at : at + 2]
    prefix = [f"{name}={value}" for name, value in (env or {}).items()]
    return shlex.join([*prefix, "vllm", "serve", *model, *args])


def split_flags(argv: list[str]) -> tuple[list[tuple[str, str | None]], str | None]:
    """`(flag, value)` pairs in order, and a positional model if the line had one.

    Accepts a whole `vllm serve MODEL ...` line as well as bare flags.
    """
    if isinstance(argv, str):
        raise HkvError("argv: got one string; expected its tokens (shlex.split(line))")
    args = list(argv)
    odd = next((a for a in args if not isinstance(a, str)), None)
    if odd is not None:
        raise HkvError(f"argv: got {odd!r}; every token is a string (shlex.split(line) gives them)")
    if args[:2] == ["vllm", "serve"]:
        args = args[2:]
    positional = None
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            if positional is None and not pairs:
                positional = token
                i += 1
                continue
            raise HkvError(f"unexpected argument {token!r}: flags take the form --name value")
        if "=" in token:
            name, value = token.split("=", 1)
            pairs.append((name, value))
        elif token in BOOLEAN_FLAGS or i + 1 == len(args) or args[i + 1].startswith("--"):
            pairs.append((token, None))
        else:
            pairs.append((token, args[i + 1]))
            i += 1
        i += 1
    return pairs, positional


def weights_dtype_of(quantization: str | None, spec: Any) -> str:
    """The weights' dtype a `--quantization` value loads (`spec`'s own where none)."""
    if quantization in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        return "int4"
    if quantization == "fp8":
        return "fp8"
    return spec.native_weights_dtype
