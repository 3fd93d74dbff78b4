"""A backend that returns times from a known profile plus noise (no GPU needed).

It exercises the real harness (``timing.measure``) and the real fit, so a test can check
that plan -> measure -> fit -> profile recovers the ground-truth coefficients. Noise is
multiplicative, ``t * (1 + noise_rel * N(0, 1))``, from the one generator passed in.

Given a :class:`~pagesim.calibrate.budget.SimulatedClock`, timing a shape advances it by
what the shape would cost on a device (setting up its inputs, then every warm-up and timed
run with its flush and launch: the constants of ``budget``), so a dry run of a budgeted
calibration goes through the budget's decisions as a GPU run would, in no time.
"""

from __future__ import annotations

import numpy as np

from pagesim.calibrate.backend import DeviceInfo
from pagesim.calibrate.budget import (
    PINNED_S_PER_BYTE,
    RUN_OVERHEAD_S,
    SETUP_S,
    SETUP_S_PER_BYTE,
    SimulatedClock,
)
from pagesim.calibrate.grid import Case
from pagesim.calibrate.timing import TimingPolicy, TimingStats, measure
from pagesim.simulator.costmodel.profile import Profile, Term

SYNTHETIC_GPU_NAME = "synthetic"


def reference_profile() -> Profile:
    """Plausible H100-class coefficients (3 TB/s, 700 TFLOP/s GEMM): a ground truth for tests."""
    attn = {
        "const_s": 6e-6,
        "s_per_byte": 1 / 2.6e12,
        "s_per_flop": 1 / 60e12,
        "s_per_block": 2e-9,
        "s_per_seq": 4e-9,
    }
    terms = {
        "gemm": Term({"const_s": 8e-6, "s_per_byte": 1 / 2.8e12, "s_per_flop": 1 / 650e12}),
        "prefill_attention": Term(
            {"const_s": 3e-5, "s_per_byte": 1 / 2.0e12, "s_per_flop": 1 / 200e12, "s_per_seq": 2e-6}
        ),
        "paged_decode_attention": Term(attn),
        "contiguous_decode_attention": Term({**attn, "s_per_block": 0.0, "s_per_byte": 1 / 2.8e12}),
        "kv_write": Term({"const_s": 4e-6, "s_per_byte": 1 / 1.5e12}),
        "block_copy": Term({"const_s": 5e-6, "s_per_byte": 1 / 2.5e12, "s_per_block": 3e-8}),
        "swap": Term({"const_s": 1e-5, "s_per_byte": 1 / 25e9, "s_per_block": 2e-6}),
    }
    return Profile(kind="synthetic", gpu_name=SYNTHETIC_GPU_NAME, gpu_spec="h100-sxm", terms=terms)


class SyntheticBackend:
    def __init__(
        self,
        truth: Profile,
        rng: np.random.Generator,
        noise_rel: float = 0.01,
        copy_bandwidth_bytes_per_s: float = 3.0e12,
        clock: SimulatedClock | None = None,
    ) -> None:
        self.truth = truth
        self.rng = rng
        self.noise_rel = noise_rel
        self.copy_bandwidth = copy_bandwidth_bytes_per_s
        self.clock = clock

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(
            name=SYNTHETIC_GPU_NAME,
            software={"backend": "synthetic"},
            gpu_spec=self.truth.gpu_spec,
        )

    def copy_bandwidth_bytes_per_s(self, policy: TimingPolicy) -> float:
        return self.copy_bandwidth

    def time_case(self, case: Case, policy: TimingPolicy) -> TimingStats:
        f = case.features
        true_s = self.truth.term(case.term).time_s(f.bytes_, f.flops, f.blocks, f.seqs, f.tokens)
        stats = measure(
            lambda: true_s * (1.0 + self.noise_rel * self.rng.standard_normal()), policy
        )
        if self.clock is not None:
            setup_s = SETUP_S + f.bytes_ * SETUP_S_PER_BYTE
            if case.term == "swap":
                setup_s += f.bytes_ * PINNED_S_PER_BYTE
            runs = policy.num_warmup + stats.num_repeats
            self.clock.advance(setup_s + runs * (stats.mean_s + RUN_OVERHEAD_S))
        return stats
