import numpy as np
import pytest

from pagesim.errors import ConfigError
from pagesim.workloads.chat import chat_prompt_len, chat_requests
from pagesim.workloads.lengthtable import LengthTable


def _table(users, replies, convs) -> LengthTable:
    return LengthTable(
        prompt_len=np.array(users), output_len=np.array(replies), conv_ids=np.array(convs)
    )


def _requests(table, num, seed=0, replace=False, keep=None):
    keep = np.ones(len(table), dtype=bool) if keep is None else keep
    return chat_requests(table, keep, num=num, replace=replace, rng=np.random.default_rng(seed))


def test_prompt_lengths_accumulate_history_and_cap():
    table = _table([10, 11, 12, 600, 700, 2000], [20, 21, 22, 600, 5, 5], [0, 0, 0, 1, 1, 2])
    assert chat_prompt_len(table).tolist() == [10, 41, 74, 600, 1024, 1024]


def test_turns_extend_earlier_turns_and_keep_order():
    table = _table([10, 11, 12, 13, 14], [20, 21, 22, 23, 24], [0, 0, 0, 1, 1])
    prompt, output, segments = _requests(table, 5, seed=5)
    by_instance: dict[int, list] = {}
    for segs in segments:
        by_instance.setdefault(segs[0][0], []).append(segs)
    assert sorted(len(v) for v in by_instance.values()) == [2, 3]
    for turns in by_instance.values():
        for k, segs in enumerate(turns):
            assert len(segs) == 2 * k + 1
            if k:
                assert segs[: len(turns[k - 1])] == turns[k - 1]
    assert [sum(n for _, n in s) for s in segments] == prompt.tolist()
    assert sorted(output.tolist()) == [20, 21, 22, 23, 24]
    ids = [sid for segs in segments for sid, _ in segs]
    assert len(set(ids)) == 8  # 5 user messages + 3 replies (a last reply is in no prompt)


def test_truncation_makes_new_segment_for_cut_message():
    table = _table([600, 600, 600], [600, 600, 600], [0, 0, 0])
    prompt, _, segments = _requests(table, 3)
    assert prompt.tolist() == [600, 1024, 1024]
    first, second, third = segments
    assert second[1] == (first[0][0] + 2, 600)  # user message of turn 1
    (cut_id, cut_len), (user1, n1) = second
    assert (cut_len, n1) == (424, 600)
    full_ids = {first[0][0], first[0][0] + 1, user1}
    assert cut_id not in full_ids
    assert third[-1][1] == 600 and third[0][1] == 424 and third[0][0] != cut_id


def test_overlong_single_message_is_cut_to_context():
    table = _table([2000], [50], [0])
    prompt, _, segments = _requests(table, 1)
    assert prompt.tolist() == [1024] and segments[0][0][1] == 1024


def test_sampling_without_replacement_runs_out():
    table = _table([10, 11], [20, 21], [0, 1])
    with pytest.raises(ConfigError, match="only 2 chat turns remain"):
        _requests(table, 3)
    prompt, _, segments = _requests(table, 7, replace=True)
    assert len(prompt) == 7
    assert len({s[0][0] for s in segments}) == 7  # each draw is a new conversation instance


def test_filtered_turn_keeps_its_history_for_later_turns():
    table = _table([10, 2, 12], [20, 21, 22], [0, 0, 0])
    keep = np.array([True, False, True])
    prompt, output, segments = _requests(table, 2, keep=keep)
    assert prompt.tolist() == [10, 10 + 20 + 2 + 21 + 12] and output.tolist() == [20, 22]
    assert len(segments[1]) == 5


def test_deterministic():
    table = _table([10, 11, 12, 13, 14], [20, 21, 22, 23, 24], [0, 0, 1, 1, 2])
    a, b = _requests(table, 20, seed=9, replace=True), _requests(table, 20, seed=9, replace=True)
    assert np.array_equal(a[0], b[0]) and a[2] == b[2]
