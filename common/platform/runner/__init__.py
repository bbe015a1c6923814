"""Running jobs: the job context a job is handed (:mod:`.job_context`), a job's tracked run and its
writes (:mod:`.job`), pipelines of jobs (:mod:`.pipeline`), the entry of a job module (:mod:`.entry`: exit codes,
signals, logging) and the ``augment`` CLI (:mod:`.cli`).
"""
