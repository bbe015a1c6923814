"""The evaluation layer: how a method's result is judged against its baseline, the same way everywhere (every
method's results, the results summary and the promotion gate).

* :mod:`.cells`     a comparison's test outcomes as counted cells, and the metrics read off them
* :mod:`.paired`    the paired comparison on the same test rows: one test's bootstrap, repeats pooled
* :mod:`.power`     the minimum detectable effect, the test size an effect needs, McNemar's test
* :mod:`.papers`    each paper's reported effect, scaled to a team's baseline
* :mod:`.evidence`  effect, interval, MDE, the paper's effect and a verdict in words
* :mod:`.predictions` the per-row predictions table, its paired cells (a DataFrame transform) and each method's
  evidence

Numpy, scipy, statsmodels and DataFrame transforms: no session, table or run (``tests/test_architecture.py``).
"""
