"""Piecewise CUDA graphs for a transformers decoder: each layer's feed-forward block (MoE or MLP)
replayed from a graph at the token counts given; attention and the KV cache stay eager.

A short forward on a fast GPU (a decode step, a 64-token turn over a long cached prefix) is
bound by the host launching kernels, not by the GPU: MiniMax-M2's layer launches about ninety,
most of them in the routed experts (router, sort, offsets, two grouped GEMMs, the weighted sum).
A feed-forward block's shapes depend on nothing but the number of tokens, so one graph per
(layer, token count) launches all of them at once. vLLM runs its models the same way, with
piecewise graphs around attention. Attention is left out because its shapes grow with the
cache; so any `Cache` (`DynamicCache`, `StaticCache`, `HkvCache`) works unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from hkv.errors import HkvError

BLOCK_NAMES = ("mlp", "block_sparse_moe")
"""Attribute names of a decoder layer's feed-forward block across transformers' models."""

WARMUP_CALLS = 3
"""Eager calls before a capture (on a side stream): cuBLAS and the allocator settle first."""


@dataclass(eq=False)
class _Graph:
    """One block at one input shape: the graph and its static input and output buffers."""

    graph: torch.cuda.CUDAGraph
    x: torch.Tensor  # [batch, tokens, hidden]
    y: torch.Tensor  # the block's output at capture, rewritten by every replay


class StaticBlockGraphs:
    """Graph every decoder layer's feed-forward block of `model` at `token_counts` tokens.

    `with StaticBlockGraphs(model, token_counts=(1, 64)):` (or `remove()` when done): inside,
    a block called with `[batch_size, n, hidden]` for a captured `n`, in the captured dtype,
    under `torch.no_grad` or `torch.inference_mode` (as `generate` runs), copies its input
    into the graph's buffer, replays, and returns a copy of the output (a later replay does not
    change a tensor already returned). Any other call runs the block eagerly, so nothing about
    the model's behaviour changes; so does every call while `enabled` is False (to time both
    ways in one run without capturing again).

    The graphs read the weights' memory as it was at capture: in-place weight updates are seen,
    weights moved or replaced are not (`remove()` and capture again). A block whose code needs
    the host to read GPU values (a Python loop over the experts hit, for instance) cannot be
    captured: it is found in a warm-up call before any capture and refused with an `HkvError`
    naming the layer; run that model with `experts_implementation="grouped_mm"` or without
    graphs. All graphs share one memory pool; their buffers stay allocated until `remove()`.
    Capture draws nothing from torch's random generators.
    """

    def __init__(self, model: Any, token_counts: Iterable[int] = (1,), batch_size: int = 1):
        counts = _checked_counts(token_counts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise HkvError(f"StaticBlockGraphs: batch_size {batch_size!r}; expected an int >= 1")
        blocks = _feed_forward_blocks(model)
        replaced = [i for i, block in enumerate(blocks) if "forward" in block.__dict__]
        if replaced:
            raise HkvError(
                f"StaticBlockGraphs: layer {replaced[0]}'s feed-forward block already has its "
                "forward replaced (graphed by another StaticBlockGraphs?); remove() that one "
                "first, or capture every token count you need in one"
            )
        self.blocks = blocks
        param = next(self.blocks[0].parameters(), None)
        if param is None or param.device.type != "cuda":
            where = "no parameters" if param is None else f"its weights on {param.device}"
            raise HkvError(
                f"StaticBlockGraphs: the model's feed-forward blocks have {where}; CUDA graphs "
                "need a model on a CUDA device (`model.to('cuda')`), and on CPU there is "
                "nothing to gain: run it as it is"
            )
        self.dtype, self.device = param.dtype, param.device
        self.hidden_size = int(model.config.hidden_size)
        self.shapes = [(batch_size, n, self.hidden_size) for n in counts]
        self.enabled = True
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: list[dict[tuple[int, ...], _Graph]] = []
        try:
            for index, block in enumerate(self.blocks):
                self._graphs.append(self._capture(index, block))
                block.forward = self._replaying(block.forward, self._graphs[-1])
        except BaseException:
            self.remove()
            raise

    def __enter__(self) -> StaticBlockGraphs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        """Every block back to its own eager `forward`; the graphs and their memory released."""
        for block in self.blocks:
            block.__dict__.pop("forward", None)
        self._graphs.clear()

    def _capture(self, index: int, block: torch.nn.Module) -> dict[tuple[int, ...], _Graph]:
        graphs = {}
        # normal tensors, even when built under inference mode: a buffer made there could not
        # be written by a later call outside it
        with torch.inference_mode(False), torch.no_grad():
            for shape in self.shapes:
                x = _fixed_input(shape, self.dtype, self.device)
                self._warm_up(index, block, x)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool):
                    y = block(x)
                graphs[shape] = _Graph(graph, x, y)
        return graphs

    def _warm_up(self, index: int, block: torch.nn.Module, x: torch.Tensor) -> None:
        """Eager calls on a side stream, the first with the host forbidden to wait for the GPU:
        a block that does (`.item()`, `nonzero`, a copy to the host) is refused here, before a
        capture could fail half-way (a failed capture leaves CUDA's random generator unusable
        for the rest of the process)."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        before = torch.cuda.get_sync_debug_mode()
        with torch.cuda.stream(side):
            torch.cuda.set_sync_debug_mode("error")
            try:
                block(x)
            except RuntimeError as exc:
                raise HkvError(
                    f"StaticBlockGraphs: layer {index}'s {type(block).__name__} at input "
                    f"{list(x.shape)} makes the host wait for GPU values "
                    f"({' '.join(str(exc).split())[:160]}), which a CUDA graph cannot replay. "
                    "Use experts_implementation='grouped_mm' for a mixture of experts, or run "
                    "without graphs"
                ) from exc
            finally:
                torch.cuda.set_sync_debug_mode(before)
            for _ in range(WARMUP_CALLS - 1):
                block(x)
        torch.cuda.current_stream(self.device).wait_stream(side)

    def _replaying(self, eager, graphs: dict[tuple[int, ...], _Graph]):
        dtype = self.dtype

        def forward(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            captured = graphs.get(tuple(hidden_states.shape))
            if (
                captured is None
                or not self.enabled
                or args
                or kwargs
                or hidden_states.dtype != dtype
                or torch.is_grad_enabled()  # a graph records no autograd
            ):
                return eager(hidden_states, *args, **kwargs)
            captured.x.copy_(hidden_states)
            captured.graph.replay()
            return captured.y.clone()

        return forward


def _fixed_input(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A capture's input: any values do (the graph is the same for all), and these draw nothing
    from the caller's random generator."""
    values = torch.linspace(-1.0, 1.0, steps=shape[0] * shape[1] * shape[2], device=device)
    return values.reshape(shape).to(dtype)


def _checked_counts(token_counts: Iterable[int]) -> list[int]:
    try:
        counts = sorted(set(token_counts))
    except TypeError:
        counts = None
    bad = not counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts)
    if bad:
        raise HkvError(
            f"StaticBlockGraphs: token_counts {token_counts!r}; expected token counts >= 1, "
            "e.g. (1, 64) for decode steps and 64-token turns"
        )
    return counts


def _feed_forward_blocks(model: Any) -> list[torch.nn.Module]:
    """Each decoder layer's feed-forward block (`model.model.layers[i].mlp` or the like)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if not layers:
        raise HkvError(
            f"StaticBlockGraphs: {type(model).__name__} has no decoder layers at "
            "`model.model.layers`; expected a transformers causal LM (Llama, MiniMax-M2, ...)"
        )
    blocks = []
    for index, layer in enumerate(layers):
        block = next((getattr(layer, n) for n in BLOCK_NAMES if hasattr(layer, n)), None)
        if not isinstance(block, torch.nn.Module):
            raise HkvError(
                f"StaticBlockGraphs: layer {index} ({type(layer).__name__}) has no feed-forward "
                f"block named {' or '.join(BLOCK_NAMES)}"
            )
        blocks.append(block)
    return blocks
