"""The demo's synthetic e-commerce world, deterministic by seed at any size: the shared randomness and each catalog
group's attributes (:mod:`.world`), the words it is made of (:mod:`.vocabulary`), its rows (:mod:`.rows`: labeled
titles, catalog offers, bad rows for the quarantine) and its query log (:mod:`.interactions`).
"""
