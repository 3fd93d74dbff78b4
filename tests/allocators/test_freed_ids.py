"""FreedIds: the set of freed sequence ids the allocators' errors consult."""

import numpy as np

from pagesim.allocators.validation import FreedIds


def test_freed_ids_behave_as_a_set():
    rng = np.random.default_rng(0)
    freed, reference = FreedIds(), set()
    for _ in range(2000):
        seq_id = int(rng.integers(-3, 500))
        if rng.random() < 0.6:
            freed.add(seq_id)
            reference.add(seq_id)
        else:
            freed.discard(seq_id)
            reference.discard(seq_id)
    for seq_id in range(-5, 800):
        assert (seq_id in freed) == (seq_id in reference), seq_id
