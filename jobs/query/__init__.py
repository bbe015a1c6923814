"""Query graph and reformulation (paper 2): the graph's jobs (:mod:`.query_graph`, which chains
``query-graph``), reformulation and augmentation (:mod:`.query_reformulation`, which chains the reformulation jobs;
its inputs :mod:`.query_reformulation_inputs`) and the matcher's evaluation (:mod:`.query_matcher`).
"""
