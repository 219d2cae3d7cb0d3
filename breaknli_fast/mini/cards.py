"""MODEL_CARD.md of each mini model, built from its ``train_info.json`` and the evaluation results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.mini.common import LENGTH_BUCKETS, folder_size, read_json
from breaknli_fast.mini.data import DEV_MODULUS, SNLI_CITATION

COMMAND = "breaknli-fast mini train --data snli_1.0_train_subset.jsonl.gz --seed 0 --threads 2"

LICENSE = f"""## License

- Weights and code: Apache-2.0 (the license of breaknli-fast).
- Training data: SNLI 1.0 (Bowman et al. 2015), CC BY-SA 4.0
  (<https://creativecommons.org/licenses/by-sa/4.0/>). The weights were trained on this data; no text of
  SNLI is stored in them beyond what the tokenizer vocabulary holds.

> {SNLI_CITATION}
"""


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f} %"


def _split_text(info: dict, ev: dict | None = None) -> str:
    d = (ev or {}).get("data") or info.get("data", {})
    return (f"SNLI 1.0 train, 100,000-pair subset; rows without gold label skipped ({d.get('skipped_no_gold_label', '?')}). "
            f"Held out: every pair whose caption id (`pairID.rsplit('r', 1)[0]`) has "
            f"`int(sha1(caption_id).hexdigest(), 16) % {DEV_MODULUS} == 0` - {d.get('dev_pairs', '?'):,} dev pairs "
            f"from {d.get('dev_captions', '?'):,} premises; training used the other {d.get('train_pairs', '?'):,} pairs "
            f"({d.get('train_captions', '?'):,} premises). The held-out pairs are split by caption into a tuning slice "
            f"({d.get('tuning_pairs', '?'):,} pairs: the captions of the first 2,000 held-out pairs; "
            f"`breaknli_fast/assets/data/snli_tuning.jsonl`), on which mini-nli's checkpoints were selected, and an "
            f"evaluation slice ({d.get('evaluation_pairs', '?'):,} pairs, `breaknli_fast/assets/data/snli_sample.jsonl`, "
            f"the default dataset), which no training or tuning step read"
            + ("." if info.get("name") == "mini-mlm" else "; the results below are on the evaluation slice.")
            + _judge_caveat(info))


def _judge_caveat(info: dict) -> str:
    """mini-t5's paraphrase rounds keep rewrites that the saved mini-nli judges entailed both ways. A mini-t5
    trained before the held-out pairs were split (its ``data`` summary has no ``tuning_pairs``) was filtered
    by a mini-nli whose checkpoints were selected on all held-out pairs, evaluation slice included."""
    if info.get("name") != "mini-t5" or "tuning_pairs" in (info.get("data") or {}):
        return ""
    return (" One indirect exception: this mini-t5 was trained before that split, and its paraphrase rounds kept "
            "the rewrites that the mini-nli of that time judged entailed both ways; that mini-nli's checkpoints were "
            f"selected on all {(info.get('data') or {}).get('dev_pairs', '?'):,} held-out pairs, the evaluation "
            "slice among them. mini-t5 never read a held-out pair itself.")


def _hw(info: dict) -> str:
    h = info.get("hardware", {})
    return f"{h.get('cpu', '?')} ({h.get('cpu_count', '?')} cores), {h.get('torch_threads', '?')} torch threads, " \
           f"{h.get('platform', '?')}, torch {h.get('torch', '?')}"


def _hp(info: dict) -> str:
    return "\n".join(f"| {k} | {v} |" for k, v in sorted(info.get("hyperparameters", {}).items()))


def _mlm_rounds(info: dict) -> str:
    rounds = info.get("rounds") or []
    if len(rounds) < 2:
        return ""
    return "Training rounds: " + "; ".join(
        f"round {i + 1} from {r.get('init')}"
        + (f" with {r['add_layers']} more layer{'s' if r['add_layers'] > 1 else ''} (copies of the top one)"
           if r.get("add_layers") else "")
        + f": {float(r.get('epochs') or 0):.2f} epochs, lr {(r.get('hyperparameters') or {}).get('lr')}, "
        f"{(r.get('train_seconds') or 0) / 60:.1f} min, final loss {r.get('final_loss')}"
        for i, r in enumerate(rounds)) + ".\n\n"


def _card(name: str, info: dict, ev: dict, size: int) -> str:
    head = f"# {name}\n\nPart of breaknli-fast: a small model trained from scratch on CPU so that " \
           "`breaknli-fast run` works offline. It is a stand-in for the real checkpoints, *not* a substitute: its " \
           "breakage rates say nothing about roberta-large-mnli or Flan-T5.\n\n"
    common = (f"## Training data and split\n\n{_split_text(info, ev)}\n\n"
              f"## Training\n\n- seed {info.get('seed')}; steps {info.get('steps')} "
              f"({info.get('epochs_done', 0):.2f} epochs); time {info.get('train_seconds', 0) / 60:.1f} min\n"
              f"- hardware: {_hw(info)}\n- parameters: {info.get('params', 0):,}; folder size {size / 1e6:.1f} MB "
              f"(weights stored as fp16 safetensors, `config.torch_dtype = float32`, so `from_pretrained` loads fp32)\n"
              f"- reproduce: `{COMMAND}` (see `docs/mini-models.md`)\n\n"
              f"| hyperparameter | value |\n|---|---|\n{_hp(info)}\n\n")
    if name == "mini-mlm":
        body = ("## Model\n\n`RobertaForMaskedLM` (RoBERTa architecture), byte-level BPE tokenizer trained on the SNLI "
                "train sentences (`tokenizers`, RoBERTa special tokens `<s> <pad> </s> <unk> <mask>`), loaded as "
                "`RobertaTokenizerFast`. Pre-trained with masked language modelling (15 % of tokens; 80/10/10) on "
                f"packed blocks of the {info.get('train_sentences', 0):,} unique train sentences (premises and "
                f"hypotheses, file order). Final MLM loss {info.get('final_loss')}.\n\n"
                + _mlm_rounds(info) +
                "Use: initialisation of `mini-nli`; not an NLI model itself.\n\n")
        return head + body + common + LICENSE
    if name == "mini-nli":
        e = ev.get("mini-nli", {})
        hist = "\n".join(f"| {h.get('round', 1)} | {h['epoch']} | {h['step']} | {h['loss']} | {_pct(h['tuning_accuracy'])} | "
                         f"{_pct(h['tuning_accuracy_ema']) if 'tuning_accuracy_ema' in h else '-'}"
                         f"{' (saved)' if h.get('saved') == 'ema' else ''} |"
                         for h in info.get("history", []))
        rounds = info.get("rounds") or []
        if len(rounds) > 1:
            hist += "\n\nTraining rounds: " + "; ".join(
                f"round {i + 1} from {r.get('init')}: {float(r.get('epochs') or 0):.2f} epochs, lr {(r.get('hyperparameters') or {}).get('lr')}, "
                f"{(r.get('train_seconds') or 0) / 60:.1f} min" for i, r in enumerate(rounds)) + "."
        body = ("## Model\n\n`RobertaForSequenceClassification` initialised from `mini-mlm`, fine-tuned on the SNLI "
                "train pairs. `id2label = {0: contradiction, 1: neutral, 2: entailment}` (the order of the common "
                "MNLI checkpoints). Tokenizer: the BPE of `mini-mlm`; input `<s> premise</s></s>hypothesis</s>`, "
                "max 128 tokens.\n\n"
                f"## Results (after the fp16 round trip, loaded in fp32)\n\n- accuracy on the evaluation slice: "
                f"**{_pct(e.get('evaluation_accuracy'))}** on {ev.get('evaluation_pairs')} pairs "
                f"(per label: " + ", ".join(f"{k} {_pct(v)}" for k, v in e.get("per_label_accuracy", {}).items()) +
                f")\n- best checkpoint on the tuning slice ({info.get('tuning_pairs')} pairs), fp32: "
                f"{_pct(info.get('best_tuning_accuracy_fp32'))}\n\n"
                f"| round | epoch | step | train loss | tuning-slice accuracy (fp32) | weight average (`--nli-ema`) |\n"
                f"|---|---|---|---|---|---|\n{hist}\n\n")
        return head + body + common + LICENSE
    e = ev.get("mini-t5", {})
    gen = ""
    for mode in ("contradictive", "entailed"):
        g = e.get(mode)
        if not g:
            continue
        gen += (f"| {mode} | {g['target']} | {g['checked']} | {_pct(g['share_target_all_outputs'])} | "
                f"{_pct(g['share_target_distinct_outputs'])} | {g['mean_distinct_candidates']} | "
                f"{g['too_few_unique']} | {g['too_few_on_target']} | **{_pct(g['survival_rate'])}** |\n")
    tasks = ", ".join(f"{k} {v:,}" for k, v in info.get("examples_by_task", {}).items())
    t5_rounds = info.get("rounds") or []
    if len(t5_rounds) > 1:
        tasks = "; ".join(
            f"round {i + 1} (from {r.get('init')}, lr {(r.get('hyperparameters') or {}).get('lr')}, "
            f"{r.get('steps')} steps = {float(r.get('epochs_done') or 0):.2f} epochs of its mix, "
            f"{(r.get('train_seconds') or 0) / 60:.1f} min): "
            + ", ".join(f"{k} {v:,}" for k, v in (r.get("examples_by_task") or {}).items())
            for i, r in enumerate(t5_rounds))
    body = ("## Model\n\n`T5ForConditionalGeneration` with the Flan-T5 / T5 v1.1 architecture (gated-GELU feed "
            "forward, untied input/output embeddings, relative attention, `decoder_start_token_id = 0` = pad). "
            "Tokenizer: SentencePiece unigram trained on the SNLI train sentences plus the prompt strings "
            "(`<pad>`=0, `</s>`=1, `<unk>`=2, no extra ids), loaded as `T5TokenizerFast`.\n\n"
            "Instruction-tuned from scratch with the exact prompts of `breaknli_fast/prompts.py` (inputs normalised): "
            "contradiction prompt - premise -> contradiction hypothesis, contradiction hypothesis -> premise, "
            "entailment hypothesis <-> contradiction hypothesis of the same premise; paraphrase prompt - premise -> "
            "entailment hypothesis, entailment hypothesis -> another entailment hypothesis of the same premise; "
            "NLI (`infer` prompt) -> `yes` / `no` / `it is not possible to tell` (for a random `nli_fraction` of the "
            "pairs). " + _extra_tasks(info) + "Training covered `epochs` of this mix in random, length-bucketed batches. "
            f"Examples per task: {tasks}; max 96 input / 48 target tokens. Final loss {info.get('final_loss')}"
            + ("" if info.get("complete", True) else " (**training incomplete: checkpoint**)") + ".\n\n"
            "## Results (after the fp16 round trip, loaded in fp32)\n\n"
            f"- NLI on the evaluation slice (first decoder step, logits of the first tokens of yes / no / it): "
            f"**{_pct(e.get('evaluation_nli_accuracy'))}**\n"
            "- As the BreakNLI generator, judged by `mini-nli`, on evaluation-slice hypotheses that mini-nli classifies "
            "correctly (K = 20 samples, top_p 0.95, top_k 50, temperature 1.0, max_new_tokens 40, seed 0; filters "
            "U = 10 distinct, S = 5 on target in both directions):\n\n"
            "| mode | target | examples | (h, h') on target, all outputs | distinct outputs | mean distinct | "
            "too few unique | too few on target | survive |\n|---|---|---|---|---|---|---|---|---|\n" + gen + "\n"
            + _by_length(e) + _t5_limits(e) + "\n")
    return head + body + common + LICENSE


def _by_length(e: dict) -> str:
    """The generator check broken down by the length of h (where the evaluation recorded it)."""
    rows = ""
    for mode in ("contradictive", "entailed"):
        buckets = (e.get(mode) or {}).get("by_hypothesis_length") or {}  # write_json sorts keys: reorder
        for bucket, b in ((k, buckets[k]) for k in LENGTH_BUCKETS if k in buckets):
            share = b["candidates_passed"] / b["candidates_checked"] if b["candidates_checked"] else None
            rows += (f"| {mode} | {bucket} | {b['checked']} | {b['too_few_unique']} | {b['too_few_on_target']} | "
                     f"{b['survivors']} | {_pct(share)} |\n")
    if not rows:
        return ""
    return ("By the length of h (the same examples; the last column is the share of the first U distinct candidates "
            "on target in both directions, over the examples that reach the relation filter):\n\n"
            "| mode | h | examples | too few unique | too few on target | survive | candidates on target |\n"
            "|---|---|---|---|---|---|---|\n" + rows + "\n")


def _extra_tasks(info: dict) -> str:
    """What the tasks of the later rounds are, for those that the model's rounds used."""
    used = set(info.get("examples_by_task") or {})
    for r in info.get("rounds") or []:
        used |= set(r.get("examples_by_task") or {})
    out = ""
    if "entail_both_ways" in used:
        out += ("`entail_both_ways` - paraphrase prompt -> a rewrite that the saved mini-nli labels entailment in both "
                "directions (SNLI's paraphrase examples, mini-t5's own rephrasings and, where the round asked for them, "
                "rule-based rewrites: synonyms, 'is sleeping' / 'sleeps', 'There is a man sleeping'). ")
    bi = [(r.get("hyperparameters") or {}).get("bi_entailed") or {} for r in info.get("rounds") or []]
    faithful = [str(i + 1) for i, b in enumerate(bi) if b.get("faithful")]
    extended = [str(i + 1) for i, b in enumerate(bi) if b.get("rules_extended")]
    if faithful:
        out += (f"In round(s) {', '.join(faithful)} SNLI's and mini-t5's own paraphrases were kept only where they also "
                "keep every content word of their source (itself, another form or a synonym; at most one new content "
                "word). ")
    hot = [f"{i + 1} ({b['self_temperature']})" for i, b in enumerate(bi) if b.get("self_temperature", 1.0) != 1.0]
    if hot:
        out += f"mini-t5's own rephrasings were sampled at another temperature in round(s) {', '.join(hot)}. "
    if extended:
        out += (f"Round(s) {', '.join(extended)} used the extended rules (a larger synonym table, 'The' / 'A' at the "
                "start, up to "
                + "/".join(str(b.get("rules_max_edits", 2)) for b in bi if b.get("rules_extended"))
                + " edits per rewrite). ")
    rich = [str(i + 1) for i, b in enumerate(bi) if b.get("rules_rich")]
    if rich:
        out += (f"Round(s) {', '.join(rich)} used the rich rules as well (a third synonym table, 'a' / 'the' inside the "
                "sentence, a final place phrase moved to the front: 'In the kitchen, a cat plays.', and 'A man and a "
                "woman' / 'A woman and a man'). ")
    if "denoise" in used:
        out += ("`denoise` - `Fill in the missing words: ` + a training sentence with one or two spans of its words "
                "replaced by `___` -> the whole sentence (text infilling, which teaches the decoder to copy its input). ")
    return out


def _t5_limits(e: dict) -> str:
    notes = ["## Limitations\n",
             "- Trained from scratch on about 100k SNLI pairs for a fraction of an epoch of the task mix on a shared "
             "CPU: outputs are SNLI-style sentences that usually keep the subject of the input and change the rest. "
             "Under the paraphrase prompt it now mostly copies the input with small edits (synonyms, 'is drinking' / "
             "'drinks', 'There is a guy drinking', 'The lady wears green'), but often also drops or changes a content word "
             "(most often in long sentences), so only a minority of its outputs are entailed in both directions, and "
             "for short sentences it often has fewer than 10 distinct rewrites among its 20 samples (the 'too few "
             "unique' column). The 'on target' shares above are judged by mini-nli, itself a weak classifier, and say "
             "as much about the judge as about the generator."]
    acc, dist = e.get("evaluation_nli_accuracy"), e.get("evaluation_pred_counts") or {}
    if acc is not None and acc < 0.45:
        top = max(dist, key=dist.get) if dist else "?"
        notes.append(f"- As an NLI model it is near chance level ({_pct(acc)}; chance 33.3 %): the first-step scores favour "
                     f"`{top}` for {dist.get(top, 0):,} of {sum(dist.values()):,} evaluation-slice pairs. Use mini-nli as the "
                     "classifier; mini-t5 as a classifier only exercises the seq2seq code path.")
    return "\n".join(notes) + "\n"


def write_cards(out_dir: str | Path, ev: dict | None = None) -> None:
    out_dir = Path(out_dir)
    ev = ev if ev is not None else (read_json(out_dir / "eval_results.json", {}) or {})
    for name in ("mini-mlm", "mini-nli", "mini-t5"):
        folder = out_dir / name
        info = read_json(folder / "train_info.json")
        if not info:
            continue
        (folder / "MODEL_CARD.md").write_text(_card(name, info, ev, folder_size(folder)), encoding="utf-8")
