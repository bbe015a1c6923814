"""MLflow tracking: runs, params, metrics and datasets (:mod:`.tracker`), what a run records besides
metrics (:mod:`.records`), runs under faults (:mod:`.status`: the server's start check, KILLED marks, dead runs
closed) and the outbox that keeps a run whole while the server is down (:mod:`.outbox`).
"""
