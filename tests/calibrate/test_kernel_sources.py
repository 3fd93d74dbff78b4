"""Every kernel source compiles with nvcc and defines every kernel the Python side launches."""

import re
import shutil

import pytest

from pagesim.calibrate.sources import SOURCE_TO_KERNELS, compile_with_nvcc, read_source

NVCC = shutil.which("nvcc")


@pytest.mark.parametrize("file_name", sorted(SOURCE_TO_KERNELS))
def test_source_defines_every_kernel_name(file_name):
    source = read_source(file_name)
    for name in SOURCE_TO_KERNELS[file_name]:
        prefix = name.rsplit("_hd", 1)[0]
        assert re.search(rf"\b{prefix}(_hd##D)?\(", source) or re.search(rf"\b{name}\(", source), (
            name
        )


@pytest.mark.slow  # nvcc takes ~4 s per architecture for the attention kernels
@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("file_name", sorted(SOURCE_TO_KERNELS))
def test_source_compiles_for_hopper_and_ampere(file_name, tmp_path):
    for arch in ("sm_90", "sm_80"):
        cubin = compile_with_nvcc(file_name, tmp_path, arch=arch, nvcc=NVCC)
        data = cubin.read_bytes()
        for name in SOURCE_TO_KERNELS[file_name]:
            assert name.encode() in data, f"{name} missing from {cubin.name}"
