"""Generators on Ray: the Ray Data actor pools (:mod:`.pool`), small CPU stages as torch tasks
(:mod:`.warm_tasks`) and the fine-tune's Ray task (:mod:`.fine_tune_ray`).
"""
