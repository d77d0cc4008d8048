"""The CPU tier's size from the article's flags: `--hybrid-kv-cache-cpu-offload-size`,
`-percent`, a config file's `cpu_offload_bytes` / `cpu_offload_percent`, or the KV that overflows
the GPUs, by `hkv.planning.offload_spec`'s rules (which `hkv plan` shares).

`CpuTierSizing` is a mixin of `hkv.planning.flags`' translator; it uses the translator's
`flags`, `out`, `value`, `number`, `spec` and `host_ram_gib`.
"""

from __future__ import annotations

from typing import Any

from hkv.errors import FlagConflict, HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.planning.offload_spec import SizeNames, check_size_and_percent, check_size_fits_ram
from hkv.planning.plan import GIB, PlanInputs, plan
from hkv.planning.sizes import parse_size
from hkv.planning.vllm_flags import weights_dtype_of

SIZE_FLAG = "--hybrid-kv-cache-cpu-offload-size"
PERCENT_FLAG = "--hybrid-kv-cache-cpu-offload-percent"
CONFIG_FLAG = "--hybrid-kv-cache-config"


class CpuTierSizing:
    """The translator's sizing of the CPU tier (bytes, all ranks together)."""

    def offload_bytes(self, config: HybridKVCacheConfig) -> int:
        """CPU tier size from the size and percent flags or the config file's fields, by
        `hkv.planning.offload_spec`'s rules."""
        size, size_name = self.requested_size(config)
        percent, percent_name = self.requested_percent(config)
        ram_name = "--cpu-ram" if self.cpu_ram_gib is not None else "host RAM"
        names = SizeNames(size_name, percent_name, ram_name)
        from_percent = self.percent_bytes(percent, percent_name) if percent is not None else None
        if size is not None and from_percent is not None:
            check_size_and_percent(size, percent, from_percent, names)
        if size is not None:
            check_size_fits_ram(size, self.host_ram_gib()[0], names)
        nbytes = next((n for n in (size, from_percent) if n is not None), None)
        nbytes = self.overflow_bytes() if nbytes is None else nbytes
        if nbytes == 0:  # given as 0, or sized by the GPUs' overflow and nothing overflows
            why = "is not needed: the KV cache fits on the GPUs" if size is None else "is 0 bytes"
            raise HkvError(f"{size_name}: the CPU tier {why}; give a size above 0")
        return nbytes

    def requested_size(self, config: HybridKVCacheConfig) -> tuple[int | None, str]:
        """The size from the flag or the file (the same when both give one), and its name."""
        text = self.value(SIZE_FLAG)
        size = None
        if text is not None:
            size, note = parse_size(text, flag=SIZE_FLAG)
            if note:
                self.out.warnings.append(note)
        return self.agreeing(size, SIZE_FLAG, config.cpu_offload_bytes, "cpu_offload_bytes")

    def requested_percent(self, config: HybridKVCacheConfig) -> tuple[float | None, str]:
        percent = self.number(PERCENT_FLAG)
        if percent is not None and not 0 < percent <= 1:
            raise HkvError(
                f"{PERCENT_FLAG}: got {percent}; expected a fraction in (0, 1], e.g. 0.4 for "
                "40 % of the KV cache"
            )
        return self.agreeing(
            percent, PERCENT_FLAG, config.cpu_offload_percent, "cpu_offload_percent"
        )

    @staticmethod
    def agreeing(flag_value: Any, flag: str, file_value: Any, field_name: str) -> tuple[Any, str]:
        if file_value is None:
            return flag_value, flag
        if flag_value is None:
            return file_value, CONFIG_FLAG
        if flag_value != file_value:
            raise FlagConflict(
                flag,
                CONFIG_FLAG,
                f"the flag says {flag_value:g}, the file's {field_name} says {file_value:g}; "
                "drop one or make them agree",
            )
        return flag_value, flag

    def percent_bytes(self, percent: float, name: str) -> int:
        """The article's `min(RAM x 0.7, total_KV x percent)`, total_KV from the plan."""
        the_plan = self.plan(offload_percent=percent)
        if the_plan.offload_bound_by == "host_ram":
            ram, where = self.host_ram_gib()
            self.out.warnings.append(
                f"{name} {percent:g} asks for {the_plan.offload_requested_bytes / GIB:.1f} GiB; "
                f"the formula min(RAM x 0.7, total_KV x percent) caps it at "
                f"{the_plan.offload_bytes / GIB:.1f} GiB ({ram:.0f} GiB from {where})"
            )
        return the_plan.offload_bytes

    def overflow_bytes(self) -> int:
        the_plan = self.plan()
        self.out.warnings.append(
            "no offload size or percent given: the CPU tier holds the KV that overflows the "
            f"GPU budget, {the_plan.offload_bytes / GIB:.1f} GiB"
        )
        return the_plan.offload_bytes

    def plan(self, **extra: Any):
        spec = self.spec()
        if spec is None:
            raise HkvError(
                f"{PERCENT_FLAG} (or no size at all) needs the model's KV size: pass --model as "
                f"a shipped name or a local config.json, or give {SIZE_FLAG}"
            )
        inputs = PlanInputs(
            gpus=self.number("--tensor-parallel-size", int) or 1,
            cpu_ram_gib=self.host_ram_gib()[0],
            max_model_len=self.number("--max-model-len", int),
            max_num_seqs=self.number("--max-num-seqs", int) or 16,
            kv_cache_dtype=self.value("--kv-cache-dtype") or "auto",
            gpu_memory_utilization=self.number("--gpu-memory-utilization") or 0.9,
            weights_dtype=weights_dtype_of(self.value("--quantization"), spec),
            **extra,
        )
        the_plan = plan(spec, inputs, suggest=False)
        if not the_plan.fits:  # (nothing to size a CPU tier by: not "the KV fits")
            raise HkvError(f"{self.size_source()}: the model does not fit these GPUs, so the CPU "
                           f"tier has no size: {the_plan.reasons[0]}; see `hkv plan`")  # fmt: skip
        return the_plan

    def size_source(self) -> str:
        """The flag the CPU tier's size comes from: the percent flag if given, else the size's
        (said to be absent where neither is given: the tier is then the GPUs' overflow)."""
        if PERCENT_FLAG in self.flags:
            return PERCENT_FLAG
        if SIZE_FLAG in self.flags:
            return SIZE_FLAG
        return f"{SIZE_FLAG} (not given)"
