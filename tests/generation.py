"""Greedy generation with a given cache, shared by the CPU and GPU cache tests."""

from __future__ import annotations

import torch


def generate(model, input_ids, cache, new_tokens=24):
    """`new_tokens` greedy tokens after `input_ids`, no early stop; returns prompt + tokens."""
    with torch.no_grad():
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            past_key_values=cache,
            do_sample=False,
            max_new_tokens=new_tokens,
            eos_token_id=None,
            pad_token_id=0,
        )


def parked_turn(model, store, name, input_ids, new_tokens):
    """One turn of session `name` in an `HkvSessionStore`, its blocks then parked in host RAM:
    (its cache, prompt + tokens)."""
    cache = store.cache_for(name, input_ids)
    out = generate(model, input_ids, cache, new_tokens=new_tokens)
    store.finish_turn(name, cache, out)
    store.park(name)
    return cache, out
