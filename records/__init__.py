"""Real servers' per-request (and per-step) records, read from the formats others
publish them in, each into one table: :class:`~pagesim.records.run.MeasuredRun`.

One file a format (``distserve_csv``, ``distserve_exp``, ``bench_json``,
``llmservingsim``, ``blis_trace``, ``lmbench``, ``steps``; ``inference_perf`` reads the
client configuration of runs that published aggregates only), the plain dict
:data:`RECORD_FORMATS` that names them, and :func:`read_run`, which recognises a run's
format by its files. ``cells`` holds what every reader opens files with.
"""

from pagesim.records.registry import RECORD_FORMATS, RecordFormat, format_of, read_run
from pagesim.records.run import MeasuredRun

__all__ = ["RECORD_FORMATS", "MeasuredRun", "RecordFormat", "format_of", "read_run"]
