"""`pagesim simulate`: flags and a YAML config become a RunSpec; the summary is printed."""

from __future__ import annotations

from pagesim.cli import main


def test_simulate_prints_the_summary(capsys):
    rc = main(
        ["simulate", "--num-requests", "20", "--rate", "5", "--kv-slots", "4096", "--seed", "1"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "throughput_req_s" in out and "mem_token_frac" in out
    assert "num_finished                  20" in out


def test_config_file_and_flags_override(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "workload: {name: sharegpt, num_requests: 10}\n"
        "scheduler: {kind: orca}\nallocator: {kind: oracle}\nhardware: {kv_slots: 4096}\n"
    )
    assert main(["simulate", "--config", str(cfg), "--num-requests", "12"]) == 0
    out = capsys.readouterr().out
    assert "orca scheduler, oracle allocator" in out and "sharegpt x 12" in out


def test_bad_config_is_one_line_error(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("allocator: {block_sise: 8}\n")
    assert main(["simulate", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml: allocator.block_sise: unknown key" in err
