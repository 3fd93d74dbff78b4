"""`pagesim calibrate link`: an all_reduce_perf log -> hardware.link (calibrate/nccl_link.py)."""

from __future__ import annotations

import pytest

from pagesim.calibrate.nccl_link import fit_link
from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.simulator.spec import run_spec_from_dict

HEADER = """\
# nThread 1 nGpus {n} minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid  4242 on  server device  0 [0x01] NVIDIA RTX PRO 6000
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def log_text(latency_us, bus_gbps, n, *, root=True, noise=()):
    """A made-up all_reduce_perf log whose times follow pagesim's formula exactly."""
    factor = 2 * (n - 1) / n
    lines = [HEADER.format(n=n)]
    for i, size in enumerate(2**k for k in range(3, 29)):
        t = (latency_us + factor * size / (bus_gbps * 1e3)) * (noise[i] if i < len(noise) else 1)
        alg = size / t / 1e3
        root_col = "      -1" if root else ""
        lines.append(
            f"{size:>12} {size // 2:>13}  bfloat16     sum{root_col} {t:8.2f} {alg:7.2f} "
            f"{alg * factor:7.2f}      0 {t:8.2f} {alg:7.2f} {alg * factor:7.2f}      0\n"
        )
    lines.append("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 9.9\n")
    return "".join(lines)


@pytest.mark.parametrize("n, root", [(2, True), (4, True), (8, False)])
def test_the_fit_recovers_the_link_that_made_the_log(tmp_path, n, root):
    log = tmp_path / "ar.log"
    log.write_text(log_text(20.0, 16.0, n, root=root))
    fit = fit_link(log)
    assert fit.ring_factor == pytest.approx(2 * (n - 1) / n, rel=0.02)
    assert fit.bus_bw_gbps == pytest.approx(16.0, rel=0.02)
    assert fit.latency_us == pytest.approx(20.0, rel=0.05)
    assert fit.sizes.min() == 8 << 10 and fit.sizes.max() == 256 << 20


def test_the_printed_block_is_a_valid_hardware_link(tmp_path, capsys):
    log = tmp_path / "ar.log"
    log.write_text(log_text(12.0, 40.0, 2, noise=[1.3, 0.8]))
    assert main(["calibrate", "link", str(log), "--source", "my server, 2 GPUs"]) == 0
    out = capsys.readouterr().out
    import yaml

    doc = yaml.safe_load(out.split("\n\n")[0])
    spec = run_spec_from_dict({"hardware": {**doc["hardware"], "tensor_parallel": 2}}, "pasted")
    assert spec.hardware.link.source == "my server, 2 GPUs"
    assert spec.hardware.link.bus_bw_gbps == pytest.approx(40.0, rel=0.05)
    assert "| 8,192 |" in out and "mean |error|" in out
    assert main(["calibrate", "link", str(log), "--min-bytes", "65536"]) == 0
    assert "fitted on 13 sizes, 65,536-268,435,456 B" in capsys.readouterr().out


def test_a_log_without_rows_or_with_too_few_is_refused_naming_the_file(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text(HEADER.format(n=2))
    with pytest.raises(DataError, match="empty.log: no result rows of nccl-tests' all_reduce_perf"):
        fit_link(log)
    log.write_text(log_text(20.0, 16.0, 2))
    with pytest.raises(DataError, match="empty.log: 1 result rows between"):
        fit_link(log, min_bytes=1 << 20, max_bytes=1 << 20)
    with pytest.raises(DataError, match="missing.log: cannot read"):
        fit_link(tmp_path / "missing.log")
