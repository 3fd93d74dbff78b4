"""Validation against real servers: one pipeline every dataset goes through.

    read records  ->  replay each run with the server's own settings  ->  compare  ->
    report (a page, charts) and ``validation.csv`` (:mod:`.vcsv`)

A dataset is a reader (:mod:`.datasets`): it recognises its folder by its files, reads
each run's per-request records (:mod:`pagesim.records.run`) with the settings the
server ran with and the run's role (fit, held out, cross-launch), and names the cost
models to replay under. :mod:`.replay` runs the replays, :mod:`.compare` computes the
statistics and errors, :mod:`.report` writes the page. DistServe's vLLM v0.2.3 runs
(:mod:`.distserve`) and a user's own ``vllm bench serve`` result are readers like any other.
"""
