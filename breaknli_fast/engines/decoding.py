"""Deterministic decoding over a backend's stepper (:class:`~breaknli_fast.engines.sampling.Stepper`), written
once: greedy search and (diverse) beam search.

* :func:`greedy_search`: the argmax of every row's logits at each step (eos masked before ``min_new_tokens``),
  finished rows dropped from the batch; the tokens transformers' greedy ``generate`` gives on the same logits.
* :func:`beam_search`: beam search, and diverse (group) beam search of Vijayakumar et al. (2018) as transformers'
  former ``_group_beam_search`` did it (that code now lives in a hub repository this package does not download):
  ``num_beams`` beams in ``num_beam_groups`` groups; at each step the groups choose in turn, and a group's
  log-probabilities are lowered by ``diversity_penalty`` times the number of times earlier groups chose each token
  at this step (Hamming diversity). Each group keeps its hypotheses as transformers' beam search does (its
  ``_beam_search`` of 4.57 and 5.x): of the ``2 x beams`` best continuations, those ranked within the first
  ``beams`` that end (eos, or the last allowed token) become hypotheses scored ``sum log p / length **
  length_penalty`` (eos counted), the best ``beams`` non-ending ones run on; a group is done when its worst kept
  hypothesis beats what its best running beam could still reach (``early_stopping=False``), or as soon as it holds
  ``beams`` hypotheses with ``early_stopping=True``. With one group and no penalty it is transformers' beam search
  (checked against ``generate(num_beams=...)`` on both stacks in the tests). The stepper's cache follows the beams: each step keeps every beam's
  parent row (:meth:`keep` with repeated positions).

The torch engine runs transformers' own ``generate`` for greedy and beam search (the reference); engines without a
transformers model object (ort) run these, and every engine runs diverse beam search here.
"""

from __future__ import annotations

from typing import Any

import torch

from breaknli_fast.engines.base import Decoding
from breaknli_fast.engines.sampling import check_scores

NEG_INF = float("-inf")


def greedy_search(stepper: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                  start_id: int, eos_id: int, min_new_tokens: int = 0) -> list[list[int]]:
    """Greedy decoding of a batch of prompts: one list of generated token ids per prompt (up to and including
    eos)."""
    b = int(input_ids.shape[0])
    stepper.start(input_ids, attention_mask, 1)
    rows: list[list[int]] = [[] for _ in range(b)]
    live = list(range(b))
    last = torch.full((b,), start_id, dtype=torch.long)
    for step in range(max_new_tokens):
        logits = stepper.step(last).float()
        check_scores(logits, step)
        if step < min_new_tokens:
            logits[:, eos_id] = NEG_INF
        nxt = logits.argmax(-1)
        keep = []
        for j, r in enumerate(live):
            tok = int(nxt[j])
            rows[r].append(tok)
            if tok != eos_id:
                keep.append(j)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(live):
            stepper.keep(torch.tensor(keep, dtype=torch.long))
            live = [live[j] for j in keep]
        last = nxt[keep]
    return rows


def beam_search(stepper: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, decoding: Decoding,
                start_id: int, eos_id: int, pad_id: int, groups: int | None = None, diversity_penalty: float = 0.0,
                length_penalty: float = 1.0, early_stopping: bool = False) -> list[list[int]]:
    """The best ``n`` hypotheses of (diverse) beam search for ONE prompt (``input_ids`` of shape ``(1, L)``), as
    lists of generated token ids (up to and including eos). ``groups``: beam groups (1: plain beam search)."""
    beams = max(decoding.num_beams or n, n)
    groups = groups or 1
    if beams % groups:
        raise ValueError(f"diverse-beam: num_beams ({beams}) must be a multiple of num_beam_groups ({groups})")
    per = beams // groups
    lp = float(length_penalty)
    stepper.start(input_ids, attention_mask, beams)
    # running beams per group: (token list, summed score); the stepper's rows are the active groups' beams in order
    running = [[([], 0.0)] + [([], NEG_INF)] * (per - 1) for _ in range(groups)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(groups)]
    done = [False] * groups
    last = torch.full((beams,), start_id, dtype=torch.long)
    active = list(range(groups))
    for step in range(decoding.max_new_tokens):
        last_step = step == decoding.max_new_tokens - 1
        logits = stepper.step(last).float()
        check_scores(logits, step)
        logprobs = torch.log_softmax(logits, dim=-1)
        if step < decoding.min_new_tokens:
            logprobs[:, eos_id] = NEG_INF
        vocab = logprobs.shape[-1]
        chosen_this_step = torch.zeros(vocab, device=logprobs.device)
        parents: dict[int, list[tuple[int, int]]] = {}  # group -> (parent row, token) of each of its next beams
        for row, g in enumerate(active):
            lpg = logprobs[row * per: (row + 1) * per] - diversity_penalty * chosen_this_step
            scores = torch.tensor([sc for _, sc in running[g]], device=lpg.device).unsqueeze(1) + lpg
            top_scores, top_idx = torch.topk(scores.view(-1), min(2 * per, scores.numel()))
            new_running: list[tuple[list[int], float]] = []
            origin: list[tuple[int, int]] = []
            for rank, (sc, flat) in enumerate(zip(top_scores.tolist(), top_idx.tolist())):
                if sc == NEG_INF:
                    break
                b, tok = divmod(flat, vocab)
                seq = running[g][b][0] + [tok]
                if tok == eos_id or last_step:  # at the last step every candidate ends, as at eos
                    if rank < per:
                        finished[g].append((sc / (len(seq) ** lp), seq))
                        finished[g].sort(key=lambda x: -x[0])
                        del finished[g][per:]
                    continue
                new_running.append((seq, sc))
                origin.append((row * per + b, tok))
                if len(new_running) == per:
                    break
            for seq, _ in new_running:
                chosen_this_step[seq[-1]] += 1
            if new_running:  # dead beams copy the first live one (their score keeps them out of every choice)
                filler, fill_origin = new_running[0][0], origin[0]
            else:
                filler, fill_origin = running[g][0][0] + [pad_id], (row * per, pad_id)
            while len(new_running) < per:
                new_running.append((filler, NEG_INF))
                origin.append(fill_origin)
            running[g] = new_running
            parents[g] = origin
            if early_stopping:
                done[g] = len(finished[g]) >= per
            elif len(finished[g]) >= per:
                best_possible = running[g][0][1] / ((step + 1) ** lp)
                done[g] = finished[g][-1][0] >= best_possible
        active = [g for g in range(groups) if not done[g]]
        if not active or last_step:
            break
        order = [o for g in active for o in parents[g]]
        stepper.keep(torch.tensor([p for p, _ in order], dtype=torch.long))
        last = torch.tensor([t for _, t in order], dtype=torch.long)
    pool = sorted((h for g in finished for h in g), key=lambda x: -x[0])
    return [seq for _, seq in pool[:n]]
