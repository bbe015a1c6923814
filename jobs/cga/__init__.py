"""CGA (paper 1): version pairs and generation (:mod:`.cga`, which chains the family), D_aug and HFT on it
(:mod:`.cga_train`), the Figure-2 sweep (:mod:`.cga_sweep`).
"""
