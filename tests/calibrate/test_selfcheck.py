"""The kernel check run before timing: a wrong kernel is reported, a faulting one stops it."""

import numpy as np
import pytest

from pagesim.calibrate.cupy_ops import Kernels
from pagesim.calibrate.host_kernels import HostLauncher, build_harness, find_cxx
from pagesim.calibrate.selfcheck import PAGED_CASES, check_kernels, summary_line
from pagesim.calibrate.sources import KERNEL_DIR


@pytest.mark.skipif(find_cxx() is None, reason="g++ (12 or newer) is not installed")
def test_a_wrong_kernel_fails_its_checks_and_the_others_still_run(build_dir, tmp_path):
    source = tmp_path / "paged_attention.cu"
    text = (KERNEL_DIR / "paged_attention.cu").read_text()
    source.write_text(
        text.replace("block_table[token / block_size]", "block_table[(token - 1) / block_size]")
    )
    harnesses = {
        "paged_attention.cu": build_harness("paged_attention.cu", build_dir, source_path=source),
        "kv_cache.cu": build_harness("kv_cache.cu", build_dir),
        "prefill.cu": build_harness("prefill.cu", build_dir),
    }
    checks = check_kernels(Kernels(np, HostLauncher(harnesses, tmp_path / "run")), np, np.asarray)
    failed = {c.name for c in checks if not c.passed}
    assert failed == {c[0] for c in PAGED_CASES}  # the contiguous kernel reads no block table
    assert all(c.passed for c in checks if c.name.startswith(("kv_write", "block_copy", "prefill")))
    assert not any(c.error for c in checks)
    assert summary_line(checks).startswith(f"kernel check: {len(failed)} of {len(checks)} FAILED")


def test_a_launch_that_raises_ends_the_check_with_its_error():
    def launch(*args):
        raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

    checks = check_kernels(Kernels(np, launch=launch), np, np.asarray)
    assert len(checks) == 1 and not checks[0].passed
    assert "illegal memory access" in checks[0].error
    assert "illegal memory access" in summary_line(checks)
