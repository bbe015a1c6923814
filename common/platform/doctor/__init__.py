"""``augment doctor``: the installation's checks (:mod:`.checks`), what a cluster config must reach
(:mod:`.cluster`) and the report (:mod:`.report`). Nothing here starts Spark or Ray.
"""
