"""Word-order permutation acceptance (UNLI; Sinha et al., "UnNatural Language Inference", ACL 2021, as set out in
Sinha's thesis, chapter "UnNatural Language Inference": the permuted test set and the Permutation Acceptance
metrics).

For each example (p, h, y) the probe builds q permutations of p and of h (``--scheme both``; ``hyp``: h only):
tokenise on whitespace and punctuation, keep punctuation tokens in place, and rearrange the other tokens so that
no position keeps its word (a derangement: "no words maintain their original position"), join with spaces. The q
permutations of a sentence are *distinct* (drawn without replacement). An example is dropped only when one of
its sentences has fewer than q distinct derangements ("we drop examples ... where we are unable to compute all
unique randomizations"); the number is computed exactly (:func:`count_derangements`), never inferred from
collisions, and recorded with the dropped example. Permutation j of every sentence starts from one random
generator seeded by (run seed, j), re-drawing until the derangement is new, so every engine sees identical
inputs.

c_i = share of example i's permuted pairs predicted as its gold label. Metrics over kept examples, each with a
95 % CI over examples (Wilson for a share of examples, a floored Student-t interval for a mean of c_i;
:mod:`breaknli_fast.stats`), as the thesis defines them: A (accuracy on the unpermuted pairs), Ω_x = share of
examples with c_i > x (Ω_max: x → 0, at least one permutation accepted; Ω_rand: x = 1/3), Ω_1.0 = share with
every permutation accepted (c_i = 1; the curve's endpoint, where c_i > 1 would be empty), the Ω_x curve
(c_i > x for x < 1, c_i = 1 at x = 1), P^c = mean c_i over all originally correct examples (D^c), P^f = mean
c_i over D^f, the originally wrong examples that some permutation flips to the gold label (c_i > 0), the mean
entropy (nats) of the predicted distribution over the permutations predicted correctly (originally correct /
wrong), and acceptance by BLEU-2 of the permutation against its original.
"""

from breaknli_fast.probes.permutation.draws import permutations
from breaknli_fast.probes.permutation.probe import PermutationConfig, PermutationProbe

__all__ = ["PermutationConfig", "PermutationProbe", "permutations"]
