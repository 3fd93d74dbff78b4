import json

import pytest

from pagesim.errors import DataError
from pagesim.workloads.sharegpt import read_sharegpt, sharegpt_table


def test_excerpt_pairs(data_dir):
    convs, report = read_sharegpt(data_dir / "sharegpt_sample.json")
    assert report.num_records == 8 and not report.is_truncated
    assert [len(c) for c in convs] == [1, 1, 1, 3, 3, 1, 1, 1]
    assert convs[0][0][0] == "How do I tell whether a KV cache is fragmented?"
    assert convs[2] == [("Can you convert 3 km to miles?", "3 km is about 1.86 miles.")]


def test_truncated_recovers_every_whole_record(data_dir):
    convs, report = read_sharegpt(data_dir / "sharegpt_sample_truncated.json")
    whole, _ = read_sharegpt(data_dir / "sharegpt_sample.json")
    assert report.is_truncated and report.num_records == 8
    assert convs == whole
    assert "truncated" in report.describe()


def test_leading_gpt_message_is_not_a_pair(data_dir):
    records = json.loads((data_dir / "sharegpt_sample.json").read_text())
    convs, _ = read_sharegpt(data_dir / "sharegpt_sample.json")
    assert records[-1]["conversations"][0]["from"] == "gpt"
    assert convs[-1] == [
        (records[-1]["conversations"][1]["value"], records[-1]["conversations"][2]["value"])
    ]


def test_table_counts_gpt2_tokens(data_dir):
    pytest.importorskip("tokenizers")
    from pagesim.workloads.tokenizer import load_token_counter

    counter = load_token_counter()
    assert counter.count(["Hello world", "", " Hello"]).tolist() == [2, 0, 1]
    table, _ = sharegpt_table(data_dir / "sharegpt_sample_truncated.json", counter)
    assert len(table) == 12
    assert table.conv_ids.tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 5, 6, 7]
    assert (table.prompt_len > 0).all() and (table.output_len > 0).all()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            '[{"id": "a", "conversations": []}, {"id": oops}, {"id": "c", "conversations": []}]',
            "record 1",
        ),
        ('[{"id": "a", "conversations": []} {"id": "b"}]', "record 1"),
        ('{"id": "a"}', "expected a JSON list"),
        ('[{"id": "a", "conversations": [{"from": "human"}]}]', "record 0 (id 'a') message 0"),
        ('[{"id": "a"}]', "record 0: expected an object with a 'conversations' list"),
    ],
)
def test_malformed_is_data_error_naming_record(tmp_path, text, needle):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataError, match="bad.json") as info:
        read_sharegpt(path)
    assert needle in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_sharegpt(tmp_path / "nope.json")


def test_empty_list_is_complete(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("[ ]")
    convs, report = read_sharegpt(path)
    assert convs == [] and not report.is_truncated and report.num_records == 0


def test_tokenizer_json_option_matches_default(tmp_path):
    pytest.importorskip("tokenizers")
    from pagesim.workloads.tokenizer import load_token_counter

    default = load_token_counter()
    default.tokenizer.save(str(tmp_path / "tokenizer.json"))
    texts = ["How do I tell whether a KV cache is fragmented?", "naïve café 😀"]
    assert load_token_counter(tmp_path).count(texts).tolist() == default.count(texts).tolist()
    with pytest.raises(DataError, match="tokenizer file not found"):
        load_token_counter(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{}")
    with pytest.raises(DataError, match="broken.json: not a readable tokenizer.json"):
        load_token_counter(tmp_path / "broken.json")
