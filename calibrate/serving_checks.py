"""Before and after a serving-path fit: data that cannot fit it, and a fit that cannot help.

Before (:func:`check_fit_records`, issue 50 item 3): a serving path has a cost per step,
per sequence or per context token, and per prefill token, fitted on each request's decode
time given the concurrency; a fit needs requests that decode (two output tokens or more),
enough of them (:data:`MIN_DECODING`), and requests that differ (identical requests give one
equation however many there are, so the coefficients cannot be told apart). Otherwise it
is refused in one line naming why, instead of writing a profile with a 0 ms path and a
"0.00%" or "nan%" error.

After (:func:`zero_fit_lines`): the coefficients are fitted non-negative (a serving path
can only add time to the kernels'), so when every one comes out 0 the kernels alone
already price the server slower than it ran: the report says so, by how much per term
(each request's decode time given the concurrency, and its TTFT, kernels alone against the
measured), and points to timing the GPU's own steps (``pagesim calibrate steps``), which a
kernel profile measured elsewhere or projected cannot replace.
"""

from __future__ import annotations

import numpy as np

from pagesim.errors import DataError

#: the fewest decoding requests a fit takes (the per-step forms have up to three
#: coefficients; two-fold cross-validation halves the requests)
MIN_DECODING = 4


def check_fit_records(name: str, prompt_len, output_len) -> None:
    """A one-line DataError when the requests of ``name`` cannot fit a serving path."""
    prompt = np.asarray(prompt_len)
    output = np.asarray(output_len)
    decoding = output > 1
    if not decoding.any():
        raise DataError(
            f"{name}: no request decodes (every output is one token): a serving path is fitted "
            "on decode times; fit on a run with longer outputs"
        )
    if decoding.sum() < MIN_DECODING:
        raise DataError(
            f"{name}: {int(decoding.sum())} decoding request(s): a serving path needs at least "
            f"{MIN_DECODING} to fit and cross-validate its coefficients"
        )
    pairs = {(int(p), int(o)) for p, o in zip(prompt[decoding], output[decoding], strict=True)}
    if len(pairs) == 1:
        ((p, o),) = pairs
        raise DataError(
            f"{name}: every decoding request is the same ({p} prompt, {o} output tokens): one "
            "equation, whatever their number, so the per-step, per-sequence and per-token costs "
            "cannot be told apart; fit on a run of varied requests"
        )


def all_zero(coefficients: dict[str, float]) -> bool:
    """Whether every fitted serving cost is 0."""
    return all(float(v) == 0.0 for v in coefficients.values())


def zero_fit_lines(
    *, decode_error: float, ttft_error: float | None, gpu: str, model: str
) -> list[str]:
    """The report's paragraph on a fit whose every coefficient is 0 (module docstring);
    ``decode_error`` and ``ttft_error``: the kernels alone, predicted / measured - 1 (mean)."""
    terms = [f"each request's decode time given the concurrency {decode_error:+.1%}"]
    if ttft_error is not None and np.isfinite(ttft_error):
        terms.append(f"TTFT {ttft_error:+.1%}")
    return [
        "",
        "**Every serving coefficient came out 0: the fit cannot help.** A serving path can only "
        "add time to the kernels', and the kernels alone already price this server slower than "
        f"it ran ({'; '.join(terms)}, kernels alone against the measured, mean). The kernel "
        f"profile is what misses here: time your model's own steps on that GPU "
        f"(`pagesim calibrate steps --models {model}@tp1` on the {gpu}, then `pagesim calibrate "
        "iterations`; docs/your_server.md, section 5) and fit the serving path on those.",
    ]
