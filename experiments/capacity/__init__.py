"""``pagesim capacity``: the highest request rate a server holds within its SLOs.

The modules, in the order a search runs them: :mod:`.slo` (the SLOs and how a rate is
judged on its requests), :mod:`.setup` (the server and the request mix, the grid of
``--vary`` points, GPU prices), :mod:`.search` (the bracket, then bisection, per point),
:mod:`.runner` (the rounds of simulations on the local executor or Ray, the output
folder), :mod:`.report` (the table, the CSVs, the chart) and :mod:`.cli` (the command).
Nothing heavy is imported here, so that ``pagesim --help`` stays fast.
"""
