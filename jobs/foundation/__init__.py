"""The jobs every pipeline stands on: the demo world (:mod:`.generate_demo`), ingest with quarantine and
dedup (:mod:`.ingest`, one input at a time :mod:`.ingest_input`), sub-sampling to a label distribution
(:mod:`.subsample`) and the lakehouse's maintenance (:mod:`.maintain`). :mod:`.foundation` chains the ``foundation``
pipeline's jobs.
"""
