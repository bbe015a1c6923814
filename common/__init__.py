"""The library the jobs share, one package per domain (dependencies point one way, top to bottom):

* ``config``      the application config: the platform's sections plus every domain's
* ``catalog``, ``querygraph``: one package per method family (a paper's methods)
* ``models``      model machinery the methods share (fastText HFT, seq2seq, generation, scoring)
* ``data``, ``algorithms``: input contracts, readers, sampling; graph algorithms
* ``platform``    config loading, Spark, Ray, the Delta lakehouse, MLflow, jobs, CLI
"""
