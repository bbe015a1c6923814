"""The library the jobs share, one package per domain (dependencies point one way, top to bottom):

* ``config``      the application config: the platform's sections plus every domain's
* ``registry``, ``stages``: what a run ships (registered models behind a gate); the model stages a job runs
  (Spark -> Ray -> Delta)
* ``catalog``, ``querygraph``, ``boostaug``, ``genre``, ``compositional``: one package per method family
* ``models``      model machinery the methods share (generators, classifiers, scoring)
* ``data``, ``algorithms``: input contracts, readers, sampling, the demo world; graph algorithms
* ``platform``    config loading, process, compute (Spark, Ray), the Delta lakehouse, MLflow tracking, reports, the
  doctor, the job runner and CLI
"""
