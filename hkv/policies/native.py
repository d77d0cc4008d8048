"""`auto`'s shadow tiers in C, where hkv's extension is built; the same decisions in Python
where it is not.

The extension (`hkv.policies._shadows`, sources in hkv/policies/_native/, built by the project's
`pip install`) replays a request through several experts' shadow tiers, each making the
decisions its Python policy makes in a `VllmTier` (hkv/policies/tier.py). It works on 64-bit
key ids (`key_bits`): a vLLM block hash's first 8 bytes, an integer key mixed by a bijection of
64-bit integers, any other key's hash mixed the same way; two keys with one id (for hashes of
other types, or vLLM digests that share their first 8 bytes) are one block to it. No block is
pinned in a shadow: only hkv's block manager pins blocks, and it reports no request's end, so no
shadow runs there. `tests/test_native_shadows.py` replays the same requests through both and
compares every request's hits; `hkv doctor` says which runs.
"""

from __future__ import annotations

from hkv.blocks import BlockMeta
from hkv.policies.base import Key

try:  # built by `pip install` (setup.py); absent where no compiler was found
    from hkv.policies import _shadows
except ImportError:  # pragma: no cover - depends on the build
    _shadows = None
# a BlockMeta's fields read from its slots in C, not through getattr (the same values)
META_SLOTS: bool = _shadows is not None and _shadows.meta_type(BlockMeta)

GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio: odd, so a bijection of 64-bit ints
MASK = (1 << 64) - 1
LABELS: frozenset[str] = frozenset(_shadows.LABELS) if _shadows is not None else frozenset()
"""The experts the extension replays (labels of `shadow.EXPERTS`); empty where it is not built."""


def built() -> bool:
    """Whether the native shadows are built and importable here."""
    return _shadows is not None


def threaded() -> bool:
    """Whether a sampled `auto`'s native shadows store each request on a background thread
    here (`ShadowSet.replay_pairs`'s `deferred`): False where they are not built, where
    HKV_SHADOW_THREAD=0 or where no thread can start (then in the caller, same results)."""
    return _shadows is not None and _shadows.Shadows(("lru",), 1).threaded()


def parallel() -> bool:
    """Whether native shadows that replay a request at once (an exact tier's) read its hits in
    the caller and store it on the background thread beside it: where they run `threaded` and
    this process may use more than one CPU (else all in the caller; the same results)."""
    return _shadows is not None and _shadows.Shadows(("lru",), 1).parallel()


def key_bits(key: Key) -> int:
    """64 well-spread bits of a block key, the same in every process for ints and bytes (a
    vLLM block hash is a digest already: its first 8 bytes). vLLM 0.32's offload key is the
    digest and its KV-cache group's index in 4 bytes (`make_offload_key`): where the length says
    so (4 past a multiple of 8), the group is mixed in, or a hybrid model's groups of one block
    would share an id (group 0's id is the digest's)."""
    if isinstance(key, int):
        return (key * GOLDEN) & MASK
    if isinstance(key, bytes):
        bits = int.from_bytes(key[:8], "little")
        if len(key) >= 12 and len(key) % 8 == 4:
            bits ^= (int.from_bytes(key[-4:], "big") * GOLDEN) & MASK
        return bits
    return (hash(key) * GOLDEN) & MASK


Columns = tuple[list, list]
"""A request's blocks as two lists of one length, its keys and their metas: what `auto` and the
vLLM adapter pass around instead of a `(key, meta)` pair a block (a pair a block would be a tier
or two of small objects outliving their request, for the garbage collector to walk)."""


def sampled(columns: Columns, threshold: int) -> Columns:
    """Of `(keys, metas)`, those whose key's bits (`key_bits`) are below `threshold`, in order:
    `auto`'s sample of a request (in C where built)."""
    if _shadows is not None:
        return _shadows.sampled(columns, threshold)
    keys, metas = columns
    kept = [i for i, key in enumerate(keys) if key_bits(key) < threshold]
    return [keys[i] for i in kept], [metas[i] for i in kept]


def known(keys: list, first: dict, second: dict) -> Columns:
    """Of `keys`, those whose meta is in `first`, else in `second`, in order, with that meta (in
    C where built): the blocks of a request `auto` holds or declined."""
    if _shadows is not None:
        return _shadows.known(keys, first, second)
    found = [(k, m) for k in keys if (m := first.get(k) or second.get(k)) is not None]
    return [k for k, _ in found], [m for _, m in found]


def note_split(keys, start: int, chunks: dict, pending: dict, metas, held: bool, held_metas=False):
    """One pass over a request's keys (in C where built): `(noted, resident)`. `noted`: of
    `keys[start:]`, those in neither `chunks` nor `pending`, in order: where `metas` is a list,
    as `(their keys, their metas[i])`, else as their indices `i`; `resident`: where `held`, the
    keys of all of `keys` in `chunks`, in order (where `metas` is a list and `held_metas`, as
    `(their keys, their metas[i])` too: a text block's meta is its position's), else None."""
    if _shadows is not None:
        return _shadows.note_split(keys, start, chunks, pending, metas, held, held_metas)
    absent = [
        i for i in range(start, len(keys)) if keys[i] not in chunks and keys[i] not in pending
    ]
    noted = absent if metas is None else ([keys[i] for i in absent], [metas[i] for i in absent])
    if not held:
        return noted, None
    if metas is None or not held_metas:
        return noted, list(filter(chunks.__contains__, keys))
    held_at = [i for i, key in enumerate(keys) if key in chunks]
    return noted, ([keys[i] for i in held_at], [metas[i] for i in held_at])


def text_metas(keys: list, ends: dict, block_tokens: int, metas: list, short=None) -> list | None:
    """None where an end in `ends` but the largest is not a whole block (a positive multiple of
    `block_tokens`); else each key's shared meta of a whole text block, `metas[end //
    block_tokens - 1]` for its end in `ends` (in C where built), None in the list where a key has
    no end there or one past `metas` (the caller works those out). A key ending where no whole
    block does (a prompt's short last block, at the largest end): `short(start, tokens)` where
    `short` is given (one call for every key so ending), `start` the end before it as
    `request.block_meta` works it out (the largest whole end, or `block_tokens` before its own if
    later, 0 at least), else None."""
    if _shadows is not None:
        return _shadows.text_metas(keys, ends, block_tokens, metas, short)
    values = list(ends.values())
    if any(type(end) is not int or end <= 0 for end in values):
        return None
    last = max(values, default=0)
    if any(end % block_tokens and end != last for end in values):
        return None
    out, made = [], None
    for key in keys:
        end = ends.get(key)
        if end is not None and end % block_tokens and short is not None:
            if made is None:
                before = max((e for e in values if not e % block_tokens), default=0)
                start = max(0, end - block_tokens, before)
                made = short(start, end - start)
            out.append(made)
            continue
        whole = end is not None and not end % block_tokens and end // block_tokens <= len(metas)
        out.append(metas[end // block_tokens - 1] if whole else None)
    return out


def prefix_split(key_groups, positions: dict, stored_keys: set) -> tuple[list, list] | None:
    """A request's keys at its end (each of `key_groups` in turn) in prefix order, by their end
    in `positions` (a stable sort; all as given where one has none there), split into those in
    `stored_keys` and the others (in C where built; None there where an end is not an int
    within 64 bits: the caller sorts)."""
    if _shadows is not None:
        return _shadows.prefix_split(key_groups, positions, stored_keys)
    keys = [key for group in key_groups for key in group]
    if None not in map(positions.get, keys):
        keys.sort(key=positions.__getitem__)
    return split_stored(keys, stored_keys)


def split_stored(keys: list, stored_keys) -> tuple[list, list]:
    """`keys` split, in their order, into those in `stored_keys` and the others."""
    return [k for k in keys if k in stored_keys], [k for k in keys if k not in stored_keys]


def key_ids(keys: list) -> list[int]:
    """`key_bits` of each key (in C where built)."""
    if _shadows is not None:
        return _shadows.key_ids(keys)
    return list(map(key_bits, keys))


def shadows(labels, capacity_blocks: int):
    """A native `Shadows` of `labels` (all in `LABELS`), each a tier of `capacity_blocks`."""
    return _shadows.Shadows(tuple(labels), capacity_blocks)


def leader(shadows, keys: dict | None, held=None, i: int = 0):
    """Expert `i` of native `shadows` (prefix-value or `leader.QUEUE_EXPERTS`), on the tier's keys
    (`_shadows.Leader`): `keys` maps each id it may hold to its key; only those in `held`
    (unless None) stay. `keys` None: each id's key is the key of dict `held` with that id."""
    return _shadows.Leader(shadows, i, keys, held)


NO_BLOCKS: Columns = ((), ())
"""A request's `(keys, metas)` where it has no block of that kind."""


def merged(misses: Columns, hits: Columns) -> list:
    """A request's `(key, meta)` pairs in prefix order, once each, from its misses and its hits
    (each `(keys, metas)`): its misses (the last meta noted for a key), then the hits that are
    not among them."""
    pairs = dict(zip(*misses, strict=True))
    for key, meta in zip(*hits, strict=True):
        if key not in pairs:
            pairs[key] = meta
    return sorted(pairs.items(), key=_position)


def columns(pairs) -> Columns:
    """A request's `(key, meta)` pairs as its `(keys, metas)` (`merged`'s pairs back to columns)."""
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def _position(pair: tuple[Key, BlockMeta]) -> int:
    return pair[1].position
