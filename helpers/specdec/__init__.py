"""Speculative decoding (handout §4): the algorithms. Studies, figures and benchmarks that use them live in
:mod:`helpers.experiments`.

- ``core``: what every method shares — the input checks, the acceptance rule (:func:`accept`), how a row finishes,
  the phase clock, the statistics (:class:`GenerationStats`, :class:`GenerationResult`);
- ``linear``: :func:`speculative_generate` (Chen et al. 2023, Algorithm 2; a round is ``draft_chain``,
  ``verify_chain``, ``accept_chain``, ``commit_chain``) and the autoregressive baseline :func:`autoregressive_generate`,
  one prompt at a time;
- ``tree``: :func:`tree_generate`, static and dynamic draft trees verified in one target forward;
- ``lookup``: :func:`prompt_lookup_generate`, model-free drafting from n-grams of the context;
- ``batched``: greedy speculative decoding of a ragged batch with per-row acceptance, and the batched AR loop;
- ``medusa``: :class:`MedusaHeads` and :func:`medusa_generate`, drafts from heads on the target's last hidden state
  (a chain or a static tree);
- ``feature_draft``: :class:`FeatureDraft` and :func:`eagle_generate`, a one-layer draft in the target's feature
  space (EAGLE-style), decoded by the target's own LM head;
- ``selfspec``: :func:`self_speculative_generate`, the model drafting for itself over a StreamingLLM view of its
  own cache (long-context self-speculation, MagicDec);
- ``divergence``: :func:`greedy_divergence`, whether a greedy output that parts from AR's does so at a near-tie
  (bf16 rounding) or is a lost token;
- ``methods``: every decoding method by name (its label, how to run it, which drafter it takes); each module above
  registers its own, and the comparisons of notebooks 10 and 13 and their benchmarks read the registry;
- ``analysis``: the Eq. 4/5 model (expected tokens per round, speedup, optimal gamma, alpha estimates,
  batch accounting, MagicDec roofline grid).
"""
from helpers.specdec.batched import batched_autoregressive_generate, batched_speculative_generate
from helpers.specdec.core import GenerationResult, GenerationStats, accept
from helpers.specdec.linear import accept_greedy, accept_sampling, autoregressive_generate, speculative_generate
from helpers.specdec.divergence import greedy_divergence
from helpers.specdec.drafter_files import load_feature_draft, load_medusa_heads
from helpers.specdec.feature_draft import FeatureDraft, eagle_generate
from helpers.specdec.lookup import prompt_lookup_generate
from helpers.specdec.medusa import MedusaHeads, medusa_generate
from helpers.specdec.selfspec import self_speculative_generate
from helpers.specdec.tree import tree_generate

__all__ = ["FeatureDraft", "GenerationResult", "GenerationStats", "MedusaHeads", "accept", "accept_greedy", "accept_sampling",
           "autoregressive_generate", "batched_autoregressive_generate", "batched_speculative_generate",
           "eagle_generate", "greedy_divergence", "load_feature_draft", "load_medusa_heads", "medusa_generate", "prompt_lookup_generate", "self_speculative_generate", "speculative_generate", "tree_generate"]
