"""Interactive explorers for JupyterLab (ipywidgets): one function per notebook returns a widget.

Each explorer is a thin layer of widgets over plain functions that compute what it shows; those are unit-tested
(``tests/test_explorers.py``) and the notebook-07 explorer is also driven in a real browser
(``tests/test_browser.py``).

- ``specdec``: notebook 07, :func:`speculative_explorer` (a live speculative generation on the CPU pair, each token
  coloured by where it came from: :func:`token_provenance`, :func:`tokens_html`); notebook 09,
  :func:`speedup_explorer` (Eq. 4/5's speedup curve against γ with the measured points: :func:`speedup_curve`);
- ``tree``: notebook 10, :func:`tree_explorer` (a slider over a tree generation's rounds, each drawn by
  :func:`draw_tree`; :func:`tree_provenance` colours its tokens like linear speculation's);
- ``batching``: notebook 05, :func:`batching_explorer` (static vs continuous batching occupancy, a scheduler
  simulation over the engine's queue and KV accounting: :mod:`helpers.batching.simulate`);
- ``kvcache``: notebook 04, :func:`kv_cache_explorer` (KV-cache bytes and a measured decode step with and without
  the cache: :func:`kv_cache_sizes`, :func:`measure_decode_step`).

Widgets are imported lazily by the explorer functions, so the pure functions import without Jupyter.
"""
from helpers.explorers.batching import batching_explorer
from helpers.explorers.kvcache import kv_cache_explorer, kv_cache_sizes, measure_decode_step
from helpers.explorers.specdec import (ACCEPTED, BONUS, CORRECTED, speculative_explorer, speedup_curve, speedup_explorer,
                                       token_pieces, token_provenance, tokens_html, verify_line)
from helpers.explorers.tree import draw_tree, tree_explorer, tree_extent, tree_provenance

__all__ = ["ACCEPTED", "BONUS", "CORRECTED", "batching_explorer", "draw_tree", "kv_cache_explorer", "kv_cache_sizes",
           "measure_decode_step", "speculative_explorer",
           "speedup_curve", "speedup_explorer", "token_pieces", "token_provenance", "tokens_html", "tree_explorer",
           "tree_extent", "tree_provenance", "verify_line"]
