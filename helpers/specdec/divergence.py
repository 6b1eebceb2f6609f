"""Whether a greedy output that differs from AR's differs only at a near-tie of the target's logits.

Greedy speculative decoding returns the target's greedy tokens exactly in exact arithmetic, and in float32 on the
CPU the workbook's outputs are identical token for token (the tests). In bfloat16 (the GPU profile) a verify forward
over several positions rounds differently from a one-token decode step, so where the target's two best tokens are
within rounding of each other the two argmaxes can differ, and from there the outputs part. That is not a lost
token: both continuations are the target's greedy choice up to the dtype's resolution. :func:`greedy_divergence`
tells such a tie from a real error by the target's margin at the first differing position.
"""
from __future__ import annotations

import pandas as pd
import torch

TIE_EPS = 4  # a near-tie: the two tokens' logits within TIE_EPS x the dtype's machine epsilon x the largest |logit|


@torch.no_grad()
def greedy_divergence(target, prompt_ids: torch.Tensor, reference, output) -> dict:
    """Where ``output`` first differs from the AR ``reference`` (new tokens, 1-D) and whether it is a near-tie.

    Returns ``{"identical", "position", "margin", "tolerance", "near_tie"}``: the target's logits at the first
    differing position (one forward over the prompt and the shared prefix, in the target's own dtype) give
    ``margin`` = logit(AR's token) - logit(the other token); ``near_tie`` when ``|margin| <= tolerance``.
    """
    reference, output = torch.as_tensor(reference).flatten().cpu(), torch.as_tensor(output).flatten().cpu()
    shared = min(len(reference), len(output))
    differs = (reference[:shared] != output[:shared]).nonzero()
    if not len(differs):
        same = len(reference) == len(output)
        return {"identical": same, "position": None if same else shared, "margin": None, "tolerance": None,
                "near_tie": same}
    position = int(differs[0])
    device = prompt_ids.device
    prefix = torch.cat([prompt_ids.flatten(), reference[:position].to(device)]).unsqueeze(0)
    logits = target(prefix).logits[0, -1].float()
    eps = torch.finfo(next(target.parameters()).dtype).eps
    margin = float(logits[int(reference[position])] - logits[int(output[position])])
    tolerance = TIE_EPS * eps * float(logits.abs().max())
    return {"identical": False, "position": position, "margin": margin, "tolerance": tolerance,
            "near_tie": abs(margin) <= tolerance}


def _near_tie(rows: pd.DataFrame) -> pd.Series:
    return rows["near_tie"].eq(True) if "near_tie" in rows else pd.Series(False, index=rows.index)


def near_ties(rows: pd.DataFrame) -> int:
    """Outputs that part from AR's only at a near-tie of the target's logits (bf16 rounding)."""
    return int((~rows["identical_to_ar"].astype(bool) & _near_tie(rows)).sum())


def greedy_lossless(rows: pd.DataFrame) -> bool:
    """Every greedy output equals AR's, or parts from it only where the target's two best tokens tie within the
    dtype's rounding (:mod:`helpers.specdec.divergence`; rows from before that check count a divergence as lost)."""
    return bool((rows["identical_to_ar"].astype(bool) | _near_tie(rows)).all())
