"""The GPU backend's code on the CPU: a numpy stand-in for CuPy, the kernels on the host shim.

Nothing here times anything meaningful; it runs every line of ``cupy_backend`` that a GPU
run would (device properties, inputs of every term, the launches with their argument
types, the pinned swap copies, freeing after each shape) and the kernel check on the
"device" path, so that a mistake in them is found before a GPU is lent.
"""

import numpy as np
import pytest
from fake_cupy import FakeCupy

from pagesim.calibrate import cupy_ops
from pagesim.calibrate.budget import priority_order, run_budgeted
from pagesim.calibrate.cupy_backend import CupyBackend
from pagesim.calibrate.cupy_ops import CupyLauncher, Kernels, compile_launcher
from pagesim.calibrate.grid import GridSpec, plan_grid
from pagesim.calibrate.host_kernels import HostLauncher, build_harness, find_cxx
from pagesim.calibrate.models import ModelDims
from pagesim.calibrate.selfcheck import check_kernels
from pagesim.calibrate.sources import SOURCE_TO_KERNELS
from pagesim.calibrate.synthetic import reference_profile
from pagesim.calibrate.timing import TimingPolicy

needs_cxx = pytest.mark.skipif(find_cxx() is None, reason="g++ (12 or newer) is not installed")

TINY = ModelDims("tiny", 256, 512, 4, 4, 64)
TINY_GRID = GridSpec(
    batch_sizes=(1, 2),
    context_lens=(1, 20),
    num_random_decode=6,
    prefill_batches=(1,),
    prefill_lens=(8,),
    gemm_tokens=(1, 4),
    kv_write_tokens=(1, 5),
    copy_num_blocks=(1, 3),
    copy_block_sizes=(4,),
    block_sweep=((2, 20),),
    variant_pairs=((1, 600),),
)
ONCE = TimingPolicy(num_warmup=0, min_repeats=1, max_repeats=1, max_rel_iqr=1.0)


@pytest.fixture
def backend(build_dir, tmp_path):
    cp = FakeCupy()
    harnesses = {f: build_harness(f, build_dir) for f in SOURCE_TO_KERNELS}
    kernels = Kernels(cp, launch=HostLauncher(harnesses, tmp_path / "launches"))
    return CupyBackend(
        np.random.default_rng(0), cp=cp, kernels=kernels, copy_bandwidth_bytes=1 << 20
    )


@needs_cxx
def test_every_planned_shape_runs_through_the_backend(backend):
    cases = plan_grid(TINY, TINY_GRID, np.random.default_rng(0))
    assert {c.kernel for c in cases} >= {"paged_v1", "paged_v2", "contiguous", "memcpy_pinned"}
    df, summary = run_budgeted(
        priority_order(cases, np.random.default_rng(1)), backend, ONCE, 1e9, reference_profile()
    )
    assert summary.num_timed == len(cases) and not summary.skipped_by_term
    assert set(df["term"]) == {c.term for c in cases}
    assert (df["median_s"] > 0).all() and (df["wall_s"] > 0).all()
    cp = backend.cp
    # swap: one copy per block and per K/V; buffers freed after every shape
    swapped = sum(2 * c.params["num_blocks"] for c in cases if c.term == "swap")
    assert cp.num_memcpy == swapped
    assert cp.memory_pool.num_frees == cp.pinned_pool.num_frees == len(cases)
    assert backend.copy_bandwidth_bytes_per_s(ONCE) > 0


@needs_cxx
def test_the_kernel_check_passes_on_the_device_path(backend):
    cp = backend.cp
    checks = check_kernels(backend.kernels, cp, cp.asnumpy)
    assert len(checks) == 10 and all(c.passed for c in checks), checks


def test_device_info_reads_what_cuda_13_dropped_from_the_attributes():
    cp = FakeCupy()  # no clockRate, memoryClockRate, memoryBusWidth, l2CacheSize properties
    backend = CupyBackend(np.random.default_rng(0), cp=cp, kernels=Kernels(cp, launch=print))
    info = backend.device_info()
    assert info.name == "Fake GPU" and info.memory_bytes == 80 << 30
    assert info.sm_clock_mhz == 1980 and info.memory_clock_mhz == 2619
    assert info.l2_bytes == 1 << 16 and backend.flush_buffer.nbytes == 2 << 16
    assert info.peak_memory_bytes_per_s == pytest.approx(3.352e12, rel=1e-3)  # H100 SXM's HBM3
    assert info.software["cupy"] == "0.0-fake" and "numpy" in info.software


def test_inputs_are_drawn_on_the_device_in_chunks(monkeypatch):
    cp = FakeCupy()
    backend = CupyBackend(np.random.default_rng(0), cp=cp, kernels=Kernels(cp, launch=print))
    monkeypatch.setattr("pagesim.calibrate.cupy_backend.RANDOM_CHUNK", 7)
    x = backend._random_half((3, 5))
    assert x.dtype == np.float16 and x.shape == (3, 5)
    assert 0 < np.std(x.astype(np.float64)) < 2 and len(np.unique(x)) > 10


class _Module:
    """A RawModule that compiles only when given an include folder with cuda_fp16.h."""

    def __init__(self, code, options):
        self.options = options

    def compile(self):
        if not any(o.startswith("-I") for o in self.options):
            raise RuntimeError("catastrophic error: cannot open source file 'cuda_fp16.h'")


def test_nvrtc_without_headers_retries_with_the_carried_ones(tmp_path, monkeypatch):
    (tmp_path / "cccl").mkdir()
    (tmp_path / "cuda_fp16.h").write_text("")
    monkeypatch.setenv(cupy_ops.INCLUDE_ENV, str(tmp_path))
    cp = type("cp", (), {"RawModule": _Module})
    assert cupy_ops.cuda_include_candidates()[0] == [str(tmp_path), str(tmp_path / "cccl")]
    launcher = compile_launcher(cp)
    assert launcher.include_dirs == (str(tmp_path), str(tmp_path / "cccl"))
    assert isinstance(launcher, CupyLauncher)
    monkeypatch.setattr(cupy_ops, "cuda_include_candidates", lambda: [])
    with pytest.raises(RuntimeError, match="cuda_fp16.h"):
        compile_launcher(cp)
