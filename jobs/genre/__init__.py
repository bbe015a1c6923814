"""Genre transfer (paper 5): topics and splits (:mod:`.genre`, which chains the family), generation
(:mod:`.genre_generate`), evaluation (:mod:`.genre_evaluate`) and its tables (:mod:`.genre_tables`).
"""
