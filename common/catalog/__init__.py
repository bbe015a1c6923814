"""The consistency paper's methods (METHODS.md section 1): catalog grouping, consistency splits and group
pseudo-labels (CST), CS-Blind blinding, CGA version pairs and augmentation sets, the consistency rate."""
