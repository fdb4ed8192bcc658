"""The resumable training loop and the learning-curve evaluator shared by capgap's trainers.

``finetune.train_query_encoder`` (LoRA on a query encoder against a frozen index) and
``colbert.train_colbert`` (a PyLate ColBERT) differ only in their batches and losses; this
package owns everything else (``loop``: the loop and checkpoints; ``convergence``: the rule
and its state; ``curve``: the curve evaluator and the validation split):

- ``seed_everything(seed)``: seeds torch and Python's ``random`` and returns the numpy sampler
  that draws every batch (call it before building anything random, e.g. LoRA weights).
- ``run_loop(batch_loss, model, optimizer, n_steps, n_items, batch_size, sampler, ...)``:
  batches of item indices from a seeded permutation per epoch, one optimiser step per batch,
  a learning-curve point every ``eval_every`` steps and at the end, a tqdm progress bar with
  loss and steps/s, and atomic checkpoints every ``checkpoint_every`` steps (weights,
  optimiser, RNG states, sampler position, curve) resumed only when their digest matches, so a
  killed run ends with the same weights and curve as an uninterrupted one.
- ``curve_evaluator(rs, doc_ids, scorer, ks, groups, max_queries)``: the curve's
  ``evaluate(step)``: train/held-out recall@k (k <= 10) on the first ``max_queries`` queries
  of each split, ranked with the evaluation tie rule.

Per step the loop does, in this order: a new permutation when the epoch is used up, the batch,
``batch_loss(batch)`` (which may draw more from the sampler), ``zero_grad``, ``backward``,
``optimizer.step()``, the curve point, the checkpoint. RNG consumption is therefore fixed by
the seed, the batch size and what ``batch_loss`` draws.
"""

from __future__ import annotations

from .convergence import (  # noqa: F401
    STATE_METRICS,
    Convergence,
    ConvergenceState,
    _objective,
    describe_state,
    relative_improvement,
    state_from_curve,
)
from .curve import curve_evaluator, curve_ks, validation_split  # noqa: F401
from .loop import (  # noqa: F401
    LoopResult,
    PartialState,
    json_digest,
    rng_state,
    run_loop,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
