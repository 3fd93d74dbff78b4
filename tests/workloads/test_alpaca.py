import json

import pytest

from pagesim.errors import DataError
from pagesim.workloads.alpaca import alpaca_table, read_alpaca


def test_reads_all_records_and_joins_input(data_dir):
    path = data_dir / "alpaca_first102.json"
    records = json.loads(path.read_text())
    pairs = read_alpaca(path)
    assert len(pairs) == 102
    assert pairs[0] == (records[0]["instruction"], records[0]["output"])
    with_input = next(i for i, r in enumerate(records) if r["input"])
    assert (
        pairs[with_input][0]
        == records[with_input]["instruction"] + "\n" + records[with_input]["input"]
    )


def test_table_means_are_short_like_alpaca(data_dir):
    pytest.importorskip("tokenizers")
    from pagesim.workloads.tokenizer import load_token_counter

    table = alpaca_table(data_dir / "alpaca_first102.json", load_token_counter())
    assert len(table) == 102
    # GPT-2 token counts of the first 102 records (the cv of alpaca-like comes from here).
    assert table.prompt_len.sum() == 1713 and table.output_len.sum() == 6584


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[{"instruction": "a", "input": "", "output": "b"}, {"instruction": "a"}]', "record 1"),
        ('[{"instruction": "a", "input": "", "output": 3}]', "record 0"),
        ('{"instruction": "a"}', "expected a JSON list"),
        ('[{"instruction": "a",\n "input": ""', "line 2: malformed JSON"),
    ],
)
def test_bad_input(tmp_path, text, needle):
    path = tmp_path / "alpaca.json"
    path.write_text(text)
    with pytest.raises(DataError, match="alpaca.json") as info:
        read_alpaca(path)
    assert needle in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_alpaca(tmp_path / "none.json")
