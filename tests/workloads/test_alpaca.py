import json

import pytest

from pagesim.errors import DataError
from pagesim.workloads.alpaca import alpaca_table, read_alpaca


def test_reads_all_records_and_joins_input(data_dir):
    path = data_dir / "alpaca_sample.json"
    records = json.loads(path.read_text())
    pairs = read_alpaca(path)
    assert len(pairs) == 12
    assert pairs[0] == ("Name three colours of a traffic light.", "Red, amber and green.")
    assert pairs[2] == ("Add the two numbers.\n17 and 25", "42")
    assert [p for p, _ in pairs] == [
        r["instruction"] + ("\n" + r["input"] if r["input"] else "") for r in records
    ]


def test_table_counts_gpt2_tokens_of_the_joined_prompt(data_dir):
    pytest.importorskip("tokenizers")
    from pagesim.workloads.tokenizer import load_token_counter

    table = alpaca_table(data_dir / "alpaca_sample.json", load_token_counter())
    assert len(table) == 12
    # by hand, GPT-2 BPE: "Add| the| two| numbers|.|\n|17| and| 25" and "42"
    assert (table.prompt_len[2], table.output_len[2]) == (9, 1)
    # "Hello| world" both ways
    assert (table.prompt_len[11], table.output_len[11]) == (2, 2)


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
