"""Projecting a profile measured (or derived) on one GPU onto another GPU spec.

Rules, per coefficient of every term:

- ``s_per_byte`` is a reciprocal bandwidth: it scales by ``source / target`` HBM
  bandwidth, except in the ``swap`` term, where the bytes cross PCIe and it scales by
  the PCIe bandwidth ratio;
- ``s_per_flop`` is a reciprocal FLOP rate: it scales by the FP16 peak ratio;
- ``const_s``, ``s_per_block``, ``s_per_seq``, ``s_per_token`` (launch latencies,
  per-item overheads, the CPU-side step overhead) are kept unchanged.

So a kernel that achieved 80% of its GPU's bandwidth is assumed to achieve 80% of
the target's. Held-out errors are kept (they describe the source fit, not the
projection) and the notes say where the profile came from.
"""

from __future__ import annotations

from pagesim.simulator.costmodel.profile import Profile, Term
from pagesim.simulator.model_gpu_specs import GPUSpec


def project_profile(profile: Profile, target: GPUSpec, source: GPUSpec) -> Profile:
    """``profile`` (measured on ``source``) rescaled to ``target`` (kind "projected")."""
    hbm = source.hbm_bw_bytes_s / target.hbm_bw_bytes_s
    pcie = source.pcie_bw_bytes_s / target.pcie_bw_bytes_s
    flops = source.fp16_flops / target.fp16_flops
    terms: dict[str, Term] = {}
    for name, term in profile.terms.items():
        coefs = dict(term.coefficients)
        if "s_per_byte" in coefs:
            coefs["s_per_byte"] *= pcie if name == "swap" else hbm
        if "s_per_flop" in coefs:
            coefs["s_per_flop"] *= flops
        terms[name] = Term(
            coefs, term.heldout_mape, term.heldout_max_err, term.num_points, term.origin
        )
    notes = (
        f"projected to {target.name} from a {profile.kind} profile of {profile.gpu_name!r} "
        f"(spec {source.name}, {profile.date or 'undated'}): bytes x{hbm:.3g} (HBM), "
        f"swap bytes x{pcie:.3g} (PCIe), FLOPs x{flops:.3g}, constants unchanged. "
        f"Source notes: {profile.notes}"
    )
    return Profile(
        kind="projected",
        gpu_name=target.name,
        gpu_spec=target.name,
        terms=terms,
        date=profile.date,
        command=profile.command,
        software=dict(profile.software),
        dtype=profile.dtype,
        notes=notes,
        sources=profile.sources,
    )
