"""What a run writes for people: dataset cards (:mod:`.cards`), report folders on a local disk or an
object store (:mod:`.folders`) and the results pages of the docs site (:mod:`.results_pages`).
"""
