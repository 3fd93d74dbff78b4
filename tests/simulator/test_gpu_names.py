"""simulator/gpu_names.py: a GPU named as nvidia-smi, clouds and people write it."""

from __future__ import annotations

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.gpu_names import resolve_gpu


@pytest.mark.parametrize(
    "text, name",
    [
        ("H100", "h100-sxm"),
        ("h100", "h100-sxm"),
        ("H100-SXM-80GB", "h100-sxm"),
        ("H100-SXM5-80GB", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("a100 80gb", "a100-80gb"),
        ("NVIDIA H200", "h200"),
        ("H200 141GB HBM3e", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
        ("rtx-pro-6000-server", "rtx-pro-6000-server"),
        ("A100-80GB", "a100-80gb"),
    ],
)
def test_a_gpu_written_any_common_way_resolves_to_its_pagesim_name(text, name):
    assert resolve_gpu(text) == name


def test_an_ambiguous_name_lists_the_candidates():
    with pytest.raises(ConfigError, match=r"--gpu 'A100': matches several.*a100-40gb, a100-80gb"):
        resolve_gpu("A100")


@pytest.mark.parametrize(
    "text",
    [
        "H100 PCIe",  # priced at SXM bandwidth: not this card
        "NVIDIA H100 NVL",
        "A100 80GB PCIe",
        "H100 40GB",  # no H100 of that memory
        "RTX 6000 Ada",  # not the RTX PRO 6000
        "RTX PRO 6000 Blackwell Workstation Edition",
        "L40S",
        "4090",
    ],
)
def test_a_gpu_pagesim_does_not_model_is_refused_with_the_known_names(text):
    with pytest.raises(ConfigError, match=r"no pagesim GPU matches it; known GPUs: a100-40gb"):
        resolve_gpu(text)
