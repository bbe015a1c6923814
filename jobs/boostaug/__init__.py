"""BoostAug (paper 3): splits and augmentation (:mod:`.boostaug`, which chains the family), the filter
(:mod:`.boostaug_filter`), the evaluation (:mod:`.boostaug_evaluate`) and its tables (:mod:`.boostaug_tables`).
"""
