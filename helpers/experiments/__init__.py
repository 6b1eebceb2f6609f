"""Experiments: what a notebook measures or reads, and the summaries it prints, shared with ``helpers.gpu_measure``
so that a configuration key or a derived column is written once."""
