"""`EvictionPolicy.evict_chains` across every online policy: the contract of `evict` still
holds (exactly n distinct resident keys, none protected, or None and nothing changed), and
a policy that ranks chains gives a chain up deepest first."""

from __future__ import annotations

import pytest

from hkv.blocks import BlockMeta
from hkv.policies import make_policy, policy_names

ONLINE = policy_names(online_only=True)
CHAIN = [10, 11, 12, 13]  # head first


def deepest_first(taken_before: set[int]):
    """A stand-in for blocks of CHAIN: its deepest block not protected or taken yet."""

    def stand_in(key, taken):
        if key not in CHAIN:
            return key
        for deeper in reversed(CHAIN):
            if deeper not in taken and deeper not in taken_before:
                return deeper
        return key

    return stand_in


def filled(policy: str):
    p = make_policy(policy, 8)
    for key in [1, 2, *CHAIN, 3]:
        p.insert(key, BlockMeta(16))
    return p


@pytest.mark.parametrize("policy", ONLINE)
def test_evict_chains_is_exactly_n_or_nothing(policy):
    p = filled(policy)
    protected = {13, 2}
    assert p.evict_chains(6, protected, deepest_first(protected)) is None
    assert len(p) == 7
    victims = p.evict_chains(3, protected, deepest_first(protected))
    assert len(set(victims)) == 3 and not set(victims) & protected
    assert all(v not in p for v in victims) and len(p) == 4


@pytest.mark.parametrize("policy", [p for p in ONLINE if make_policy(p, 4).ranks_chains])
def test_a_chain_leaves_deepest_first_at_its_first_blocks_rank(policy):
    """Inserted head first after 1 and 2: the chain goes, tail first, after them and before
    3, the newest."""
    p = filled(policy)
    assert p.evict_chains(6, set(), deepest_first(set())) == [1, 2, 13, 12, 11, 10]
