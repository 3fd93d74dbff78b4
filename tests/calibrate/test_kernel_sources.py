"""Every kernel source compiles with nvcc for Ampere and Hopper, defines every kernel the
Python side launches, and stays within its register and shared-memory budgets (no spills)."""

import re

import pytest

from pagesim.calibrate.cupy_ops import attention_tile
from pagesim.calibrate.sources import (
    MAX_REGISTERS_PER_THREAD,
    MAX_SHARED_BYTES_PER_BLOCK,
    SOURCE_TO_KERNELS,
    compile_with_nvcc,
    find_nvcc,
    parse_ptxas_log,
    ptxas_resources,
    read_source,
)

NVCC = find_nvcc()
ARCHS = ("sm_80", "sm_90")
#: the largest dynamic shared memory a launch asks (cupy_ops: 4 bytes per tile token)
MAX_DYNAMIC_SHARED_BYTES = 4 * max(attention_tile(1 << i) for i in range(9))  # blocks 1..256


@pytest.mark.parametrize("file_name", sorted(SOURCE_TO_KERNELS))
def test_source_defines_every_kernel_name(file_name):
    source = read_source(file_name)
    for name in SOURCE_TO_KERNELS[file_name]:
        prefix = name.rsplit("_hd", 1)[0]
        assert re.search(rf"\b{prefix}(_hd##D)?\(", source) or re.search(rf"\b{name}\(", source), (
            name
        )


def budget_violations(r) -> list[str]:
    out = []
    if r.spill_store_bytes or r.spill_load_bytes:
        out.append(f"spills {r.spill_store_bytes} B stored, {r.spill_load_bytes} B loaded")
    if r.stack_frame_bytes:
        out.append(f"stack frame {r.stack_frame_bytes} B")
    if r.registers > MAX_REGISTERS_PER_THREAD:
        out.append(f"{r.registers} registers > {MAX_REGISTERS_PER_THREAD}")
    if r.static_shared_bytes + MAX_DYNAMIC_SHARED_BYTES > MAX_SHARED_BYTES_PER_BLOCK:
        out.append(f"shared {r.static_shared_bytes} + {MAX_DYNAMIC_SHARED_BYTES} B")
    return out


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit or nvidia-cuda-nvcc wheel) not found")
@pytest.mark.parametrize("file_name", sorted(SOURCE_TO_KERNELS))
def test_every_kernel_compiles_within_budget_for_ampere_and_hopper(file_name, tmp_path):
    for arch in ARCHS:
        resources = {r.kernel: r for r in ptxas_resources(file_name, tmp_path, arch, NVCC)}
        assert sorted(resources) == sorted(SOURCE_TO_KERNELS[file_name]), arch
        data = (tmp_path / f"{file_name.removesuffix('.cu')}.{arch}.cubin").read_bytes()
        for name, r in resources.items():
            assert name.encode() in data, f"{name} missing from the {arch} cubin"
            assert r.arch == arch and r.registers > 0
            assert budget_violations(r) == [], r


def test_budget_check_reads_spills_and_registers():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1056 bytes smem, 408 bytes cmem[0]
ptxas info    : Compiling entry function 'j' for 'sm_80'
ptxas info    : Function properties for j
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers, used 0 barriers
"""
    k, j = parse_ptxas_log(log)
    assert (k.kernel, k.registers, k.spill_store_bytes, k.spill_load_bytes) == ("k", 255, 8, 4)
    assert (k.stack_frame_bytes, k.static_shared_bytes) == (16, 1056)
    assert (j.kernel, j.registers, j.static_shared_bytes, j.spill_store_bytes) == ("j", 20, 0, 0)


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit or nvidia-cuda-nvcc wheel) not found")
def test_register_starved_build_fails_the_budget(tmp_path):
    """Capped at 16 registers (kernels without __launch_bounds__), the v2 reduction spills."""
    resources = ptxas_resources("paged_attention.cu", tmp_path, "sm_80", NVCC, "-maxrregcount=16")
    failing = {r.kernel: budget_violations(r) for r in resources if budget_violations(r)}
    assert "attention_v2_reduce_hd128" in failing, failing
    assert "spills" in failing["attention_v2_reduce_hd128"][0]


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit or nvidia-cuda-nvcc wheel) not found")
def test_compile_with_nvcc_writes_a_cubin(tmp_path):
    cubin = compile_with_nvcc("kv_cache.cu", tmp_path, arch="sm_80", nvcc=NVCC)
    assert b"copy_blocks" in cubin.read_bytes()


def test_cupy_launcher_calls_the_raw_kernel_of_its_source():
    """The GPU launcher (not runnable here) hands grid, block, args and shared memory to the
    RawModule of the launch's source, as CuPy's RawKernel.__call__ takes them."""
    from pagesim.calibrate.cupy_ops import CupyLauncher

    calls = []

    class FakeModule:
        def __init__(self, code, options):
            self.code = code

        def get_function(self, name):
            return lambda grid, block, args, shared_mem: calls.append(
                (self.code, name, grid, block, args, shared_mem)
            )

    class FakeCupy:
        RawModule = FakeModule

    launch = CupyLauncher(FakeCupy())
    launch("kv_cache.cu", "copy_blocks", (3, 2), (256,), [1, 2], 0)
    launch("paged_attention.cu", "paged_attention_v1_hd64", (4, 1), (128,), (5,), 256)
    assert [c[1:] for c in calls] == [
        ("copy_blocks", (3, 2), (256,), (1, 2), 0),
        ("paged_attention_v1_hd64", (4, 1), (128,), (5,), 256),
    ]
    assert calls[0][0] == read_source("kv_cache.cu")
    assert calls[1][0] == read_source("paged_attention.cu")
