"""Random damage to real manifests (each re-committed, so that the reader gets past the
manifest's checksum to its fields): opening, listing, reading and verifying must
either work or raise a ckpt.Error, never another exception. CKPT_PY_FUZZ_ROUNDS
sets the rounds per checkpoint (default 200; the seed is fixed)."""

import os
import random

import pytest

import ckpt
from damage import recommit

ROUNDS = int(os.environ.get("CKPT_PY_FUZZ_ROUNDS", "200"))


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        at = rng.randrange(len(b))
        if kind < 0.5:
            b[at] ^= 1 << rng.randrange(8)
        elif kind < 0.7:
            b[at] = rng.choice([0x00, 0xFF, 0xC0, 0xC1, 0xDC, 0xDD, 0xDE, 0xDF, 0xCF, 0xD3, 0x7F, 0x80, 0x90, 0xA0])
        elif kind < 0.85:
            del b[at:at + rng.randint(1, 16)]
        else:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        if not b:
            b = bytearray(b"\x80")
    return bytes(b)


@pytest.mark.parametrize("name", ["kinds", "chunked", "records", "sharded_one"])
def test_damaged_manifests_raise_ckpt_errors(copy_of, name):
    d = copy_of(name)
    original = (d / "manifest").read_bytes()
    rng = random.Random(name)
    outcomes = {"error": 0, "read": 0}
    for _ in range(ROUNDS):
        recommit(d, mutate(rng, original))
        try:
            ck = ckpt.open(d)
            for leaf in ck.leaves():
                ck.read(leaf.segments)
            ck.verify()
            outcomes["read"] += 1
        except ckpt.Error:
            outcomes["error"] += 1
    assert outcomes["error"] > ROUNDS // 2, outcomes
