"""Seven ways to decode, each with a KV cache, each returning a :class:`Generation`; one module per notebook.

* :func:`naive` -- one model, one token per forward pass (notebook 01): greedy, temperature, top-k, top-p.
* :func:`contrastive` -- Li et al. 2022, "Contrastive Decoding" (notebook 02): among the tokens the expert finds
  plausible, V_head = {x : p_exp(x) >= α · max_w p_exp(w)}, pick argmax log p_exp(x) - log p_ama(x).
* :func:`speculative` -- Leviathan et al. 2023, Algorithm 1 / Chen et al. 2023 (notebook 03): the amateur drafts
  γ tokens, the expert scores all of them in one forward pass, modified rejection sampling keeps exactly the
  expert's distribution.
* :func:`prompt_lookup` -- Saxena 2023, prompt-lookup decoding (notebook 06): the draft is copied from the context
  after an earlier occurrence of its last n-gram, then verified exactly as in :func:`speculative` (no amateur).
* :func:`contrastive_search` -- Su et al. 2022, "A Contrastive Framework for Neural Text Generation", Eq. (5)
  (notebook 06): one model; among its top-k tokens, trade probability against similarity to the context.
* :func:`dola` -- Chuang et al. 2023, "DoLa: Decoding by Contrasting Layers" (notebook 06): one model; its final
  layer is the expert, the early layer it disagrees with most is the amateur.
* :func:`speculative_contrastive` -- Yuan et al. 2023, "Speculative Contrastive Decoding" (notebook 08): the
  amateur drafts and supplies the contrast; the expert verifies against the contrastive distribution p_cd
  (O'Brien & Lewis 2023's logit form), exactly as :func:`contrastive_sample` draws from it token by token.

Where they live (every public name is also importable from ``helpers.decoding`` itself):

* :mod:`~helpers.decoding.core` -- results, input checks, the sampling distribution and its two random draws, the
  model with a KV cache that rolls back;
* :mod:`~helpers.decoding.baseline` -- naive decoding (01); :mod:`~helpers.decoding.contrast` -- contrastive
  decoding (02);
* :mod:`~helpers.decoding.speculation` -- speculative decoding (03): the verification loop for any drafter, and
  the amateur as drafter;
* :mod:`~helpers.decoding.lookup` and :mod:`~helpers.decoding.one_model` -- prompt lookup, contrastive search and
  DoLa (06);
* :mod:`~helpers.decoding.speculative_contrast` -- both at once (08): the contrastive target, its plain sampler and
  its speculative loop.

Notation follows Leviathan et al.: **p is the expert (target), q the amateur (draft)**.
``temperature=0`` means greedy everywhere. Every function takes a (1, T) LongTensor prompt and returns only the
new tokens.
"""

from helpers.decoding.baseline import naive, penalize_repetition
from helpers.decoding.contrast import Candidate, ContrastiveScores, ContrastiveStep, contrastive, contrastive_scores
from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    Stats,
    bernoulli,
    check_inputs,
    probabilities,
    sample,
)
from helpers.decoding.lookup import lookup_draft, prompt_lookup
from helpers.decoding.one_model import (
    DolaStep,
    SearchStep,
    contrastive_search,
    dola,
    dola_low_layers,
    jensen_shannon,
)
from helpers.decoding.speculation import Proposer, SpecIteration, draft_and_verify, speculative
from helpers.decoding.speculative_contrast import (
    ContrastiveModel,
    contrastive_logits,
    contrastive_sample,
    speculative_contrastive,
)

__all__ = ["CachedModel", "Candidate", "ContrastiveModel", "ContrastiveScores", "ContrastiveStep", "DolaStep", "EosIds",
           "Generation", "Proposer", "SearchStep", "SpecIteration", "Stats", "bernoulli", "check_inputs",
           "contrastive", "contrastive_logits", "contrastive_sample", "contrastive_scores", "contrastive_search",
           "dola", "dola_low_layers", "draft_and_verify", "jensen_shannon", "lookup_draft", "naive",
           "penalize_repetition", "probabilities", "prompt_lookup", "sample", "speculative",
           "speculative_contrastive"]
