"""**Do not use for generation.** A faithful port of the source article's speculative decoding loop, bugs included.

It exists only so that notebook 03 and ``tests/test_seed_reference.py`` can *show* that it is biased: its output
distribution is not the expert's. Its faults (numbered as in notebook 03 and ``shared/reference/facts.md``):

1. **Inverted acceptance.** It rejects a draft token when ``q > p and r > 1 - p/q``, i.e. with probability p/q,
   instead of accepting with probability min(1, p/q).
2. **Padding read as context.** The expert scores a right-padded batch of the γ prefixes (pad id 0, no attention
   mask) and reads ``logits[:, -1]``, which for every row but the longest is the logit after pad tokens.
3. **Off by one.** Row n already ends with draft token n+1, so the distribution that judges draft n+1 is the one
   *after* it, not the one that should have predicted it.
4. **No KV cache anywhere**, and its naive baseline has none either (notebook 04 measures what that costs).

The article's names are kept (``generate_cache``, ``speculative_decoding``); what changed is only what the
machine translation mangled, the models and RNG passed in instead of globals, and a return of the new tokens.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def _sample_from_distribution(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=generator)


@torch.no_grad()
def generate_cache(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, n_tokens: int,
                   generator: torch.Generator | None = None
                   ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    amateur_logits_per_step = []
    generated_tokens = []
    batch_input_ids = []
    for _ in range(n_tokens):
        amateur_logits = torch.softmax(amateur(input_ids).logits[:, -1, :], dim=-1)  # no KV cache (bug 4)
        amateur_logits_per_step.append(amateur_logits)
        next_token = _sample_from_distribution(amateur_logits, generator)
        generated_tokens.append(next_token)
        input_ids = torch.cat((input_ids, next_token), dim=-1)
        batch_input_ids.append(input_ids.squeeze(0))  # row n already contains draft n+1 (bug 3)
    batched_input_ids = torch.nn.utils.rnn.pad_sequence(batch_input_ids, batch_first=True, padding_value=0)
    expert_logits = torch.softmax(expert(batched_input_ids).logits[:, -1, :], dim=-1)  # pad positions (bug 2)
    return amateur_logits_per_step, expert_logits, torch.cat(generated_tokens, dim=-1)


@torch.no_grad()
def speculative_decoding(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor,
                         n_tokens: int = 5, max_length: int = 50,
                         generator: torch.Generator | None = None) -> list[int]:
    """The article's loop; returns the tokens it adds to ``input_ids`` (it stops at ``max_length`` in total)."""
    prompt_length = input_ids.shape[1]
    while input_ids.shape[1] < max_length:
        amateur_logits_per_step, expert_logits, generated_ids = generate_cache(
            expert, amateur, input_ids, n_tokens, generator)
        accepted = 0
        for n in range(n_tokens):
            token = generated_ids[:, n][0]
            r = torch.rand(1, generator=generator).item()
            p_x = expert_logits[n][token].item()
            q_x = amateur_logits_per_step[n][0][token].item()
            if (q_x > p_x) and (r > (1 - p_x / q_x)):  # rejects with probability p/q (bug 1)
                break
            accepted += 1
        if (input_ids.shape[1] + accepted) >= max_length:
            return input_ids[0, prompt_length:].tolist()
        input_ids = torch.cat((input_ids, generated_ids[:, :accepted]), dim=-1)
        if accepted < n_tokens:
            diff = expert_logits[accepted] - amateur_logits_per_step[accepted][0]
            clipped_diff = torch.clamp(diff, min=0)
            normalized_result = clipped_diff / torch.sum(clipped_diff, dim=0, keepdim=True)
            next_token = _sample_from_distribution(normalized_result, generator)
        else:
            next_token = _sample_from_distribution(expert_logits[-1], generator)
        input_ids = torch.cat((input_ids, next_token.unsqueeze(1)), dim=-1)
    return input_ids[0, prompt_length:].tolist()
