"""Training the CPU pair: a small Qwen3 target and Qwen3 drafts that share one BPE tokenizer.

    python -m helpers.training                 # CPU recipe, about 70 minutes on an idle 2-core machine
    python -m helpers.training --smoke         # 2-minute end-to-end check (writes to /tmp)
    python -m helpers.training --device cuda   # GPU recipe (bf16 autocast, batch 64, same step counts)
    python -m helpers.training --stage long    # target-long: the target fine-tuned on 4096-token windows
                                               # (about 15 minutes; notebook 11)
    python -m helpers.training --stage drafts  # notebook 12's drafts at equal parameter count (about 45 minutes)
    python -m helpers.training --stage drafts --draft-shape 3x160 --draft-shape 2x192-shared

The committed weights (``data/cpu_pair/``) are the default CPU run. The corpus is text that every Python
installation carries (:mod:`helpers.models.corpus`); the models' shapes are the model package's
(:mod:`helpers.models.cpu_pair_shapes`). Stages, one module each:

1. ``tokenizer``: a byte-level BPE tokenizer (4096 entries) trained on the training split;
2. ``train``: the target, trained with next-token cross-entropy;
3. ``distill``: the drafts, initialised from the target's embedding, first layer(s) and final norm
   (``initialise``; they share its width), then distilled from the frozen target (KL to its logits, which is
   what raises greedy agreement);
4. ``evaluate``: parameters, training tokens, held-out loss, the per-token decode cost of each draft relative to
   the target on CPU, and greedy agreement; ``card`` writes them to ``card.json`` and ``MODEL_CARD.md``
   (``pair`` runs stages 2 to 4);
5. ``long_context`` (``--stage long``, separately): ``target-long``, a copy of the target fine-tuned on long
   windows (its context limit raised) so that it uses context far beyond the 256-token windows of stage 2; the
   card gains its held-out loss by position bucket, next to the target's;
6. ``family`` (``--stage drafts``, separately): notebook 12's drafts of one parameter count and different shapes,
   from one seed and one recipe; the card gains each draft's parameters, held-out loss, decode cost ratio and
   greedy agreement.

``cli`` turns the flags into :class:`Settings` and runs one stage; ``checkpoints`` saves weights as bf16
safetensors (the 30 MB budget), loaded back as float32 by :func:`helpers.models.load_cpu_pair`. Seeds fix the
initialisation and the data order, and every stage runs a fixed number of steps, so a rerun with the same thread
count repeats the same computation; only the wall time depends on the machine.
"""
