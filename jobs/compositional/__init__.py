"""Compositional augmentation (paper 4): split, label sets and QC (:mod:`.compositional`, which chains
the family), generation (:mod:`.compositional_generate`), evaluation (:mod:`.compositional_evaluate`) and its tables
(:mod:`.compositional_tables`).
"""
