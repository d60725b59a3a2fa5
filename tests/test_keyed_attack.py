"""KeyedLimiter under crafted and flooding keys.

The attacker computes keys offline with the library's own hash: XXH3-64 with the fixed seed
that slidewin used for every table before tables were seeded at random (reimplemented here
for keys of 4 to 8 bytes, and checked against the binding's `_fingerprint` where it exists),
so that the keys land next to a victim's entry in the table. With a table seeded at random
those keys are just random keys and evict nobody in particular.
"""

from __future__ import annotations

import random

import pytest

from slidewin import KeyedLimiter

T = 10**12
MS = 10**6

# ---- the attacker's copy of the hash --------------------------------------------------------

PUBLIC_SEED = 0x736C69646577696E  # "slidewin": the seed every table used before
_M = (1 << 64) - 1
_SECRET_8_24 = bytes([0x7C, 0x01, 0x81, 0x2C, 0xF7, 0x21, 0xAD, 0x1C,  # XXH3's default secret
                      0xDE, 0xD4, 0x6D, 0xE9, 0x83, 0x90, 0x97, 0xDB])  # bytes 8..23
_BITFLIP = int.from_bytes(_SECRET_8_24[:8], "little") ^ int.from_bytes(_SECRET_8_24[8:], "little")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def xxh3_4to8(data: bytes, seed: int) -> int:
    """XXH3_64bits_withSeed for 4 <= len(data) <= 8 (XXH3_len_4to8_64b)."""
    n = len(data)
    assert 4 <= n <= 8
    seed ^= int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big") << 32
    i1 = int.from_bytes(data[:4], "little")
    i2 = int.from_bytes(data[n - 4:], "little")
    h = ((i2 + (i1 << 32)) & _M) ^ ((_BITFLIP - seed) & _M)
    h ^= _rotl(h, 49) ^ _rotl(h, 24)
    h = (h * 0x9FB21C651E98DF25) & _M
    h ^= (h >> 35) + n
    h = (h * 0x9FB21C651E98DF25) & _M
    return h ^ (h >> 28)


def fingerprint(key: str, seed: int = PUBLIC_SEED) -> int:
    """A str key's fingerprint under `seed` (the type tag 's' in the seed's top byte)."""
    h = xxh3_4to8(key.encode(), seed ^ (ord("s") << 56))
    return h or 1


def cap_of(max_keys: int) -> int:
    """Entries of a table (README: 1.3 a key)."""
    return max_keys + max_keys * 3 // 10 + 1


def home_of(fp: int, max_keys: int) -> int:
    return (fp * cap_of(max_keys)) >> 64


def crafted_keys(victim: str, max_keys: int, count: int, before: int = 8) -> list[str]:
    """`count` keys whose home lies at most `before` entries before the victim's, under the
    public seed: their probe runs go through the victim's entry."""
    cap = cap_of(max_keys)
    h = home_of(fingerprint(victim), max_keys)
    out, i = [], 0
    while len(out) < count:
        k = f"u{i:07d}"
        i += 1
        if (h - home_of(fingerprint(k), max_keys)) % cap <= before:
            out.append(k)
    return out


MAX_KEYS = 4096
_CRAFTED: dict[tuple[str, int], list[str]] = {}


def crafted(victim: str, count: int) -> list[str]:
    if (victim, count) not in _CRAFTED:
        _CRAFTED[(victim, count)] = crafted_keys(victim, MAX_KEYS, count)
    return _CRAFTED[(victim, count)]


def test_the_attackers_hash_is_the_librarys():
    fp = getattr(KeyedLimiter, "_fingerprint", None)
    if fp is None:
        pytest.skip("no test-only _fingerprint in this build")
    kl = KeyedLimiter(qps=1)
    for key in ["alice", "u0000001", "u12345", "abcdefgh", "abcd"]:
        assert kl._fingerprint(key, PUBLIC_SEED) == fingerprint(key), key
    # the table's own seed is another one (random)
    assert kl._fingerprint("alice") != fingerprint("alice")


def login_limiter() -> KeyedLimiter:
    return KeyedLimiter(qps=5 / 60, interval_ms=60_000, max_keys=MAX_KEYS)


def alice_after_crafted_floods(kl: KeyedLimiter, rounds: int) -> int:
    """Alice tries 6 logins, the attacker sends its crafted keys, again and again within one
    60 s window: how many of alice's attempts were admitted."""
    keys = crafted("alice", 300)
    admitted, t = 0, T
    for _ in range(rounds):
        for _ in range(6):
            admitted += kl.try_acquire("alice", now_ns=t)
        for k in keys:
            t += MS // 10
            kl.try_acquire(k, now_ns=t)
    return admitted


def test_crafted_keys_do_not_restart_a_login_limit():
    kl = login_limiter()
    assert alice_after_crafted_floods(kl, rounds=10) == 5


def test_crafted_keys_with_the_seed_known_would():
    """The control: a table given the public seed (test-only) is the one the keys were
    crafted for, and they do evict alice there (so the test above tests something)."""
    kl = login_limiter()
    if not hasattr(kl, "_set_seed"):
        pytest.skip("no test-only _set_seed in this build")
    kl._set_seed(PUBLIC_SEED)
    assert alice_after_crafted_floods(kl, rounds=10) > 5


def test_crafted_keys_in_flight_do_not_refuse_a_new_client():
    """A per-client concurrency limit: 316 crafted clients each hold a request; a new client
    with nothing in flight is admitted, and a client holding one keeps its count."""
    kl = KeyedLimiter(concurrency=1, max_keys=MAX_KEYS)
    assert kl.try_acquire("bobby", now_ns=T)
    for k in crafted("alice", 316) + crafted("bobby", 316):
        kl.try_acquire(k, now_ns=T)
    assert kl.in_flight("bobby") == 1
    assert not kl.try_acquire("bobby", now_ns=T)  # its count was kept
    assert kl.try_acquire("alice", now_ns=T)    # nothing in flight: admitted
    assert kl.in_flight("alice") == 1
    kl.release("alice")
    kl.release("bobby")


@pytest.mark.parametrize("max_keys", [1000, 4096])
def test_a_random_flood_does_not_evict_a_hot_key(max_keys):
    """A key used once per 10 new random keys gets at most its limit in one window."""
    kl = KeyedLimiter(qps=100, max_keys=max_keys)
    rng = random.Random(18)
    hot = 0
    for i in range(30_000):
        if i % 10 == 0:
            hot += kl.try_acquire("hot", now_ns=T)
        else:
            kl.try_acquire(rng.getrandbits(62), now_ns=T)
    assert kl.stats(now_ns=T).evicted > 20_000
    assert hot == 100


def test_seeds_differ_between_tables():
    fp = getattr(KeyedLimiter, "_fingerprint", None)
    if fp is None:
        pytest.skip("no test-only _fingerprint in this build")
    a, b = KeyedLimiter(qps=1), KeyedLimiter(qps=1)
    assert a._fingerprint("alice") != b._fingerprint("alice")
    # a key's limit does not depend on the seed
    assert a.try_acquire("alice", now_ns=T) and not a.try_acquire("alice", now_ns=T)


def test_set_seed_only_on_an_empty_private_table():
    kl = KeyedLimiter(qps=1)
    if not hasattr(kl, "_set_seed"):
        pytest.skip("no test-only _set_seed in this build")
    with pytest.raises(ValueError, match="seed"):
        kl._set_seed(0)
    kl.try_acquire("x", now_ns=T)
    with pytest.raises(ValueError, match="empty"):
        kl._set_seed(PUBLIC_SEED)


# ---- shared regions: the seed is the creator's, in the region's header ---------------------

def _find_seed(data: bytes, fp_alice: int) -> int:
    """The offset of the table's seed in a region's bytes: the 8 bytes that hash "alice" to
    the fingerprint the binding computes."""
    for off in range(0, len(data) - 8, 8):
        seed = int.from_bytes(data[off:off + 8], "little")
        if seed and fingerprint("alice", seed) == fp_alice:
            return off
    raise AssertionError("no seed in the region")


def test_a_shared_region_keeps_its_creators_random_seed(tmp_path):
    import sys
    from slidewin import _core

    path = tmp_path / "k"
    a = KeyedLimiter(qps=5, max_keys=16, shared=str(path))
    b = KeyedLimiter(qps=5, max_keys=16, shared=str(path))
    other = KeyedLimiter(qps=5, max_keys=16, shared=str(tmp_path / "k2"))
    fp = a._fingerprint("alice")
    assert b._fingerprint("alice") == fp          # every user of the region hashes alike
    assert other._fingerprint("alice") != fp      # another region: another seed
    assert fp != fingerprint("alice")             # not the public seed
    with pytest.raises(ValueError, match="shared"):
        a._set_seed(PUBLIC_SEED)
    assert a.try_acquire("alice", 5, now_ns=T)
    assert not b.try_acquire("alice", now_ns=T)   # the same key for both
    data = path.read_bytes()
    off = _find_seed(data, fp)
    del a, b
    # a region whose seed is 0 (damaged, or written by a version without one) is refused
    path.write_bytes(data[:off] + bytes(8) + data[off + 8:])
    with pytest.raises(ValueError):
        KeyedLimiter(qps=5, max_keys=16, shared=str(path))
    # a region of layout version 4 (a fixed seed) is refused by its version
    assert _core.LAYOUT_VERSION >= 5
    path.write_bytes(data[:8] + (4).to_bytes(4, sys.byteorder) + data[12:])
    with pytest.raises(ValueError, match="incompatible.*version 4"):
        KeyedLimiter(qps=5, max_keys=16, shared=str(path))
