"""Generation benchmarks (handout §1.3 and §4.2): timed generation and forward-pass sweeps with resumable results.

- ``sweeps``: exact-length generation, the generation and forward sweeps (time-capped, OOM rows), status and
  protocol tables, fits and ordering checks.
"""
