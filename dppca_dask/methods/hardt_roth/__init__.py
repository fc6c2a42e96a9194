"""Hardt & Roth's mechanisms: private power iteration (``pca`` and ``lowrank``), private low-rank approximation
and randomized response (``lowrank``)."""
