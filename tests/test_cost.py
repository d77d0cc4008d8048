"""Cost model: the numbers of docs/design.md §3-4, the load-or-recompute decision, profiles and
calibration."""

from __future__ import annotations

import json

import pytest

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.calibrate import calibrate
from hkv.cost import CostModel, HardwareProfile, LinkSpec, _context_sum
from hkv.errors import HkvError


@pytest.fixture(scope="module")
def minimax() -> CostModel:
    return CostModel.default()


def block(position_blocks: int = 0, modality: Modality = Modality.TEXT) -> BlockMeta:
    return BlockMeta(tokens=512, position=position_blocks * 512, modality=modality)


def test_a_minimax_block_holds_124_mib(minimax):
    assert minimax.block_bytes(block()) == 512 * 253_952 == 124 * 2**20


def test_loading_from_pinned_host_takes_about_2_5_ms(minimax):
    assert minimax.load_s(block(), Tier.HOST) == pytest.approx(2.5e-3, rel=0.03)


def test_host_load_is_about_ten_times_cheaper_than_recompute(minimax):
    ratio = minimax.recompute_s(block()) / minimax.load_s(block(), Tier.HOST)
    assert 8 < ratio < 12


def test_disk_can_cost_more_than_recompute_at_the_start_of_a_prompt(minimax):
    assert minimax.load_s(block(), Tier.DISK) == pytest.approx(0.12, rel=0.1)
    assert minimax.decide(block(), Tier.DISK).action == "recompute"
    assert minimax.decide(block(), Tier.HOST).action == "load"
    assert minimax.decide(block(), Tier.DISK).saved_s == 0


def test_deep_blocks_cost_more_to_recompute_and_win_on_disk(minimax):
    costs = [minimax.recompute_s(block(p)) for p in (0, 64, 256)]
    assert costs[0] < costs[1] < costs[2]
    assert minimax.decide(block(256), Tier.DISK).action == "load"  # 128K tokens in


def test_gpu_resident_blocks_cost_nothing_to_load(minimax):
    assert minimax.load_s(block(), Tier.GPU) == 0


def test_vision_and_audio_blocks_add_their_encoder(minimax):
    text = minimax.recompute_flops(block())
    assert minimax.recompute_flops(block(0, Modality.VISION)) > text
    assert minimax.recompute_flops(block(0, Modality.AUDIO)) > text


def test_quantized_cold_blocks_move_fewer_bytes(minimax):
    full = minimax.block_bytes(block())
    # 8-bit codes + key min/scale per 64 tokens (16/64) + value min/scale per token (16/128)
    assert minimax.block_bytes(block(), "q8") == pytest.approx(full * 8.375 / 16, rel=1e-6)
    assert minimax.load_s(block(), Tier.HOST, "q4") < minimax.load_s(block(), Tier.HOST)
    with pytest.raises(HkvError, match="cold format"):
        minimax.block_bytes(block(), "q3")


@pytest.mark.parametrize(
    ("start", "tokens", "window"),
    [(0, 512, None), (1000, 512, None), (0, 512, 256), (200, 512, 256), (4096, 512, 1024)],
)
def test_context_sum_matches_counting(start, tokens, window):
    counted = sum(min(t + 1, window or 10**12) for t in range(start, start + tokens))
    assert _context_sum(start, tokens, window) == pytest.approx(counted)


def test_profile_round_trips_through_json(tmp_path):
    path = HardwareProfile.default().save(tmp_path / "p.json")
    assert HardwareProfile.load(path) == HardwareProfile.default()


def test_bad_profiles_are_user_errors(tmp_path):
    with pytest.raises(HkvError, match="profile: no such file"):
        HardwareProfile.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(HkvError, match="not valid JSON"):
        HardwareProfile.load(tmp_path / "bad.json")
    (tmp_path / "odd.json").write_text(json.dumps({"links": {}}))
    with pytest.raises(HkvError, match="hkv calibrate"):
        HardwareProfile.load(tmp_path / "odd.json")


def test_a_bool_is_no_bandwidth_latency_or_rate():
    good = HardwareProfile.default()
    with pytest.raises(HkvError, match="to_gpu_gbps: got True"):
        LinkSpec(True, 1.0, 0.0)
    with pytest.raises(HkvError, match="latency_s: got False"):
        LinkSpec(1.0, 1.0, False)
    with pytest.raises(HkvError, match="prefill_tflops: got True"):
        HardwareProfile(good.name, good.links, True, good.host_memcpy_gbps)
    assert LinkSpec(2, 1.5, 0).to_gpu_gbps == 2  # ints are numbers


def test_calibrate_measures_host_and_disk(tmp_path):
    profile = calibrate(disk_dir=tmp_path, size_mib=4, repeats=1)
    assert profile.host_memcpy_gbps > 0
    assert "links.disk.to_gpu_gbps" in profile.measured
    assert profile.links["disk"].to_gpu_gbps > 0
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    reloaded = HardwareProfile.load(profile.save(tmp_path / "me.json"))
    assert reloaded.links["disk"] == profile.links["disk"]


def test_calibrate_rejects_bad_arguments(tmp_path):
    with pytest.raises(HkvError, match="size_mib"):
        calibrate(size_mib=0)
    with pytest.raises(HkvError, match="disk_dir"):
        calibrate(disk_dir=tmp_path / "nope", size_mib=1)


def test_disk_crossover_is_the_first_prefix_whose_load_beats_its_recompute(minimax):
    chunk = 512
    crossover = minimax.disk_crossover_tokens(chunk)
    assert crossover is not None and crossover % chunk == 0
    load = minimax.load_s(BlockMeta(tokens=chunk, tier=Tier.DISK))

    def saved(m):
        return sum(
            minimax.recompute_s(BlockMeta(tokens=chunk, position=p)) - load
            for p in range(0, m, chunk)
        )

    assert saved(crossover) > 0 >= saved(crossover - chunk)
    assert saved(crossover + 8 * chunk) > saved(crossover)  # longer prefixes save more


def test_no_disk_crossover_within_a_short_context(minimax):
    assert minimax.disk_crossover_tokens(512, max_tokens=4096) is None


def test_a_tier_or_modality_given_as_its_plain_value_is_priced_as_the_member():
    """Tier is an IntEnum and Modality a StrEnum: `1`, "host" and "vision" are the members they
    name (identity tests priced host as disk and dropped the vision encoder's FLOPs)."""
    cm = CostModel.default()
    meta = BlockMeta(16, position=64)
    for plain, member in ((0, Tier.GPU), (1, Tier.HOST), ("host", Tier.HOST), (2, Tier.DISK)):
        assert cm.load_s(meta, plain) == cm.load_s(meta, member)
        assert cm.store_s(meta, plain) == cm.store_s(meta, member)
    vision = BlockMeta(16, position=64, modality=Modality.VISION)
    assert cm.recompute_s(BlockMeta(16, position=64, modality="vision")) == cm.recompute_s(vision)
    for junk in ("ssd", 7, True, None):
        with pytest.raises(HkvError, match="unknown tier"):
            cm.load_s(meta, junk if junk is not None else "none")
    with pytest.raises(HkvError, match="unknown modality 'video'"):
        cm.recompute_s(BlockMeta(16, modality="video"))


def test_encoder_flops_and_the_kv_dtype_are_checked():
    for value in (float("nan"), -1e12, float("inf"), "5e9"):
        with pytest.raises(HkvError, match="vision_encoder_flops_per_token: got"):
            CostModel.default(vision_encoder_flops_per_token=value)
    with pytest.raises(HkvError, match="audio_encoder_flops_per_token: got"):
        CostModel.default(audio_encoder_flops_per_token=-1)
    with pytest.raises(HkvError, match="kv_cache_dtype: got 8; expected auto or one of"):
        CostModel.default(kv_cache_dtype=8)
    assert CostModel.default(vision_encoder_flops_per_token=0).recompute_s(BlockMeta(16)) > 0
