"""The Delta lakehouse: the table API (:mod:`.lakehouse`), table versions' metadata and lineage
(:mod:`.metadata`, :mod:`.tables`), the Ray handoff (:mod:`.ray_io`), the two write paths (delta-rs: :mod:`.delta_rs`,
:mod:`.delta_rs_read`, :mod:`.delta_files`; Spark's native Delta: :mod:`.delta_native`), the commit lease on an object
store and the flock beside a local table (:mod:`.commit_lease`, :mod:`.commit_flock`), and maintenance
(:mod:`.maintenance`).
"""
