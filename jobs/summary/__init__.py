"""The results summary across pipelines (:mod:`.summary`, the job): its facts (:mod:`.summary_facts`), sections
(:mod:`.summary_sections`, :mod:`.summary_classifiers`) and tables (:mod:`.summary_tables`).
"""
