"""What a process is and how it ends: the suite's signal handling and its Terminated error
(:mod:`.signals`, :mod:`.termination`), the native heap's release (:mod:`.native_heap`), the identity a lease or a run
records so a later process can tell a dead holder from a live one (:mod:`.identity`), and installed package versions
(:mod:`.packages`).
"""
