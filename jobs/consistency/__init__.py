"""The consistency pipeline (paper 1's CST): item versions grouped (:mod:`.group_catalog`), the splits
(:mod:`.consistency_splits`), HFT trained and evaluated (:mod:`.consistency_train`, :mod:`.consistency_hft`), its
results table (:mod:`.consistency_results`) and what it ships (:mod:`.consistency_registry`). :mod:`.consistency`
chains its jobs.
"""
