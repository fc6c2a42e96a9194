"""Mechanism families of dppca_dask, one home each."""
