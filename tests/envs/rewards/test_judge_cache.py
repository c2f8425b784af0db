"""The verdict cache: keys follow everything that decides a verdict; disk survives a process."""

from __future__ import annotations

from agentenvs.envs.rewards.judge_cache import VerdictCache, cache_key, clear_memory_cache


def test_the_key_changes_with_model_prompt_and_input():
    base = {"model": "m", "prompt_sha256": "p", "messages": ["hi"]}
    keys = {
        cache_key(base),
        cache_key({**base, "model": "m2"}),
        cache_key({**base, "prompt_sha256": "p2"}),
        cache_key({**base, "messages": ["hi!"]}),
    }
    assert len(keys) == 4
    assert cache_key(dict(reversed(base.items()))) == cache_key(base)


def test_memory_disk_and_off(tmp_path):
    clear_memory_cache()
    memory = VerdictCache("memory")
    memory.put("k", "SCORE: 3")
    assert VerdictCache("memory").get("k") == "SCORE: 3"  # one map per process
    disk = VerdictCache("disk", tmp_path / "cache")
    disk.put("k", "SCORE: 4")
    assert VerdictCache("disk", tmp_path / "cache").get("k") == "SCORE: 4"
    assert not list((tmp_path / "cache").glob("*.tmp"))
    (tmp_path / "cache" / "bad.json").write_text("{torn")
    assert disk.get("bad") is None  # a torn file is a miss, not a crash
    off = VerdictCache("off")
    off.put("k", "x")
    assert off.get("k") is None
