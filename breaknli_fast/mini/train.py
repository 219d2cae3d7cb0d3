"""Train the shipped mini models on SNLI (CPU, seeded, reproducible).

Stages (each a library function, all driven by :func:`train_all`):

1. :func:`train_tokenizers` - byte-level BPE (RoBERTa) and SentencePiece unigram (T5) on SNLI train text;
2. :func:`pretrain_mlm`   - ``mini-mlm``: RoBERTa masked LM on the unique SNLI train sentences;
3. :func:`finetune_nli`   - ``mini-nli``: RoBERTa sequence classifier fine-tuned from mini-mlm;
4. :func:`train_t5`       - ``mini-t5``: T5 v1.1 (Flan-T5 architecture) instruction-tuned with the BreakNLI prompts;
5. :func:`evaluate_models` (in :mod:`breaknli_fast.mini.evaluate`) - dev accuracies, generator usefulness,
   filter survival; writes the model cards.

The hyperparameters of every round of every stage (the recipe of the shipped models) are the data file
``recipe.json`` beside this module, loaded into :data:`DEFAULTS`.

Command line: ``breaknli-fast mini train --data snli_1.0_train.jsonl [--out DIR] [--seed 0]`` (its options are
read in :mod:`breaknli_fast.mini.command`). Held-out (dev) pairs are never trained on: see
:mod:`breaknli_fast.mini.data` for the split rule.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines.base import Decoding, derive_seed
from breaknli_fast.engines.registry import load_generator
from breaknli_fast.mini.common import (folder_size, hardware, log, make_progress, n_params, pad_batch, read_json,
                                       save_fp16, seed_everything, set_threads, write_json)
from breaknli_fast.mini.data import Pair, SnliSplit, load_split, write_sample
from breaknli_fast.mini.evaluate import NliClassifier, evaluate_models
from breaknli_fast.mini.paraphrase_rules import keeps_content, rule_paraphrases
from breaknli_fast.mini.recipe import DEFAULT_OUT, RECIPE_FILE, load_recipe  # noqa: F401 (re-exported)
from breaknli_fast.mini.tokenizers_mini import prompt_lines, train_bpe, train_sentencepiece
from breaknli_fast.probes.breaknli.loop import dedup_candidates
from breaknli_fast.prompts import CONTRADICT_PROMPT, ENTAIL_PROMPT, NLI_ANSWERS, NLI_PROMPTS

# id2label order of the common MNLI checkpoints
NLI_ID2LABEL = {0: CONTRADICTION, 1: NEUTRAL, 2: ENTAILMENT}
NLI_LABEL2ID = {v: k for k, v in NLI_ID2LABEL.items()}
INFO_FILE = "train_info.json"

# the recipe of the shipped models, as train_all and the stages read it
DEFAULTS: dict[str, Any] = load_recipe()


# ----------------------------------------------------------------------------------------------- helpers

def _linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def _adamw(model: torch.nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.98)) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=1e-6)


def _train_step(model: torch.nn.Module, loss: torch.Tensor, opt: torch.optim.Optimizer, sched: Any,
                run_loss: float, step: int) -> float:
    """Backward, clip the gradient norm at 1, optimizer and schedule step; returns the running
    (exponentially smoothed) loss after ``step`` steps."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    value = loss.item()
    return value if step == 1 else 0.98 * run_loss + 0.02 * value


class WeightAverage:
    """Exponential moving average of a model's floating-point parameters (``decay`` per step), which can be
    swapped into the model for an evaluation or a save and swapped back out."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = float(decay)
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        for k, v in model.state_dict().items():
            if k in self.shadow:
                self.shadow[k].mul_(self.decay).add_(v.detach(), alpha=1.0 - self.decay)

    @contextlib.contextmanager
    def swapped_in(self, model: torch.nn.Module):
        state = model.state_dict()
        live = {k: state[k].detach().clone() for k in self.shadow}
        model.load_state_dict(self.shadow, strict=False)
        try:
            yield model
        finally:
            model.load_state_dict(live, strict=False)


def _total_steps(n_batches_per_epoch: int, epochs: float, max_steps: int | None) -> int:
    total = max(1, int(math.ceil(n_batches_per_epoch * epochs)))
    return min(total, max_steps) if max_steps else total


def unique_train_sentences(split: SnliSplit) -> list[str]:
    """Premises and hypotheses of the training pairs, deduplicated, in file order (premise before its hypotheses)."""
    seen: set[str] = set()
    out: list[str] = []
    for p in split.train:
        for s in (p.premise, p.hypothesis):
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def _earlier_rounds(previous: dict, keys: Sequence[str], **first: Any) -> list[dict]:
    """The training rounds recorded in a model's saved ``train_info.json`` (``previous``; empty when the
    model starts from elsewhere): its ``rounds``, or, for an info written before rounds were recorded, one
    round made of its ``keys`` and ``first``."""
    if not previous:
        return []
    return list(previous.get("rounds") or [{k: previous.get(k) for k in keys} | first])


def _round_totals(rounds: Sequence[dict], epochs_key: str = "epochs") -> dict[str, Any]:
    """Steps, epochs and training seconds summed over ``rounds``, as ``train_info.json`` records them."""
    return {"steps": sum(r["steps"] or 0 for r in rounds),
            "epochs_done": round(sum(r[epochs_key] or 0 for r in rounds), 3),
            "train_seconds": round(sum(r["train_seconds"] or 0 for r in rounds), 1)}


# ----------------------------------------------------------------------------------------------- tokenizers

def train_tokenizers(split: SnliSplit, out_dir: str | Path, which: Sequence[str] = ("bpe", "spm"),
                     bpe_vocab: int = DEFAULTS["bpe_vocab"], spm_vocab: int = DEFAULTS["spm_vocab"],
                     seed: int = 0) -> dict[str, Any]:
    """Train the tokenizers on the unique SNLI train sentences; save them to ``out_dir/mini-mlm`` (BPE,
    also used by mini-nli) and ``out_dir/mini-t5`` (SentencePiece). Returns ``{"bpe": tok, "spm": tok}``."""
    out_dir = Path(out_dir)
    texts = unique_train_sentences(split)
    toks: dict[str, Any] = {}
    if "bpe" in which:
        t0 = time.perf_counter()
        toks["bpe"] = train_bpe(texts, out_dir / "mini-mlm", vocab_size=bpe_vocab)
        log.info("BPE tokenizer: vocab %d, %.1f s", len(toks["bpe"]), time.perf_counter() - t0)
    if "spm" in which:
        t0 = time.perf_counter()
        toks["spm"] = train_sentencepiece(texts + prompt_lines(), out_dir / "mini-t5", vocab_size=spm_vocab, seed=seed)
        log.info("SentencePiece tokenizer: vocab %d, %.1f s", len(toks["spm"]), time.perf_counter() - t0)
    return toks


# ----------------------------------------------------------------------------------------------- mini-mlm

def _mlm_blocks(tok: Any, sentences: Sequence[str], block: int) -> torch.Tensor:
    ids = tok(list(sentences), add_special_tokens=False)["input_ids"]
    stream: list[int] = []
    for s in ids:
        stream.extend(s)
        stream.append(tok.eos_token_id)
    width = block - 2
    n = len(stream) // width
    arr = torch.tensor(stream[: n * width], dtype=torch.long).view(n, width)
    bos = torch.full((n, 1), tok.bos_token_id, dtype=torch.long)
    eos = torch.full((n, 1), tok.eos_token_id, dtype=torch.long)
    return torch.cat([bos, arr, eos], dim=1)


def _mask_tokens(ids: torch.Tensor, tok: Any, prob: float, vocab: int, gen: torch.Generator):
    labels = ids.clone()
    special = (ids == tok.bos_token_id) | (ids == tok.eos_token_id) | (ids == tok.pad_token_id)
    chosen = (torch.rand(ids.shape, generator=gen) < prob) & ~special
    labels[~chosen] = -100
    inputs = ids.clone()
    r = torch.rand(ids.shape, generator=gen)
    inputs[chosen & (r < 0.8)] = tok.mask_token_id
    rand_pos = chosen & (r >= 0.8) & (r < 0.9)
    inputs[rand_pos] = torch.randint(5, vocab, ids.shape, generator=gen)[rand_pos]
    return inputs, labels


def _mlm_loss(model: Any, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM loss with the LM head applied to the masked positions only (same loss as
    ``RobertaForMaskedLM(labels=...)``, a fraction of the cost with an 8k vocabulary)."""
    hidden = model.roberta(input_ids=inputs, attention_mask=torch.ones_like(inputs)).last_hidden_state
    sel = labels != -100
    logits = model.lm_head(hidden[sel])
    return torch.nn.functional.cross_entropy(logits, labels[sel])


def grow_layers(model: Any, n: int) -> Any:
    """Append ``n`` encoder layers to a RoBERTa model, each a copy of its current top layer (progressive
    stacking); the config's ``num_hidden_layers`` follows."""
    layers = model.roberta.encoder.layer
    for _ in range(n):
        layers.append(copy.deepcopy(layers[-1]))
    model.config.num_hidden_layers = len(layers)
    for i, layer in enumerate(layers):  # keep the layer indices transformers gives its modules consistent
        for mod in layer.modules():
            if hasattr(mod, "layer_idx"):
                mod.layer_idx = i
    return model


def pretrain_mlm(split: SnliSplit, out_dir: str | Path, tok: Any | None = None, seed: int = 0,
                 max_steps: int | None = None, progress: bool = True, init: str = "scratch", add_layers: int = 0,
                 **hp: Any) -> dict:
    """Pre-train ``mini-mlm`` (RobertaForMaskedLM) on packed blocks of the unique SNLI train sentences.

    ``init="mlm"`` continues from the saved ``mini-mlm`` instead (a further round with a fresh schedule),
    after appending ``add_layers`` copies of its top layer; the rounds are recorded in ``train_info.json``."""
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    cfg = {**DEFAULTS["mlm"], **{k: v for k, v in hp.items() if v is not None}}
    out = Path(out_dir) / "mini-mlm"
    tok = tok or RobertaTokenizerFast.from_pretrained(out)
    previous = read_json(out / INFO_FILE, {}) if init == "mlm" else {}
    if init == "mlm" and not previous:
        raise FileNotFoundError(f"no saved mini-mlm to continue from in {out}")
    rounds = _earlier_rounds(previous, ("hyperparameters", "steps", "train_seconds", "loss_curve", "final_loss"),
                             init="scratch", add_layers=0, epochs=previous.get("epochs_done"))
    seed_everything(seed + len(rounds))
    sentences = unique_train_sentences(split)
    blocks = _mlm_blocks(tok, sentences, cfg["block"])
    if init == "mlm":
        model = RobertaForMaskedLM.from_pretrained(out, dtype=torch.float32, hidden_dropout_prob=cfg["dropout"],
                                                   attention_probs_dropout_prob=cfg["dropout"])
        grow_layers(model, add_layers)
        cfg.update(hidden=model.config.hidden_size, layers=model.config.num_hidden_layers,
                   heads=model.config.num_attention_heads, intermediate=model.config.intermediate_size)
    else:
        config = RobertaConfig(
            vocab_size=len(tok), hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
            num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate"],
            max_position_embeddings=cfg["max_positions"], type_vocab_size=1, pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, layer_norm_eps=1e-5,
            hidden_dropout_prob=cfg["dropout"], attention_probs_dropout_prob=cfg["dropout"],
        )
        model = RobertaForMaskedLM(config)
    model.train()
    bs = cfg["batch_size"]
    per_epoch = math.ceil(len(blocks) / bs)
    total = _total_steps(per_epoch, cfg["epochs"], max_steps)
    opt = _adamw(model, cfg["lr"], cfg["weight_decay"])
    sched = _linear_schedule(opt, int(cfg["warmup"] * total), total)
    gen = torch.Generator().manual_seed(seed + 1)
    log.info("mini-mlm: %d sentences -> %d blocks of %d tokens; %d params; %d steps", len(sentences), len(blocks),
             cfg["block"], n_params(model), total)
    t0 = time.perf_counter()
    step, run_loss, losses = 0, 0.0, []
    with make_progress(progress) as bar:
        task = bar.add_task("mini-mlm", total=total, info="")
        while step < total:
            perm = torch.randperm(len(blocks), generator=gen)
            for b in range(per_epoch):
                if step >= total:
                    break
                ids = blocks[perm[b * bs:(b + 1) * bs]]
                inputs, labels = _mask_tokens(ids, tok, cfg["mask_prob"], len(tok), gen)
                loss = _mlm_loss(model, inputs, labels)
                step += 1
                run_loss = _train_step(model, loss, opt, sched, run_loss, step)
                bar.update(task, advance=1, info=f"loss {run_loss:.3f}")
                if step % 100 == 0 or step == total:
                    losses.append((step, round(run_loss, 4)))
                    log.info("mini-mlm step %d/%d loss %.4f (%.0f s)", step, total, run_loss, time.perf_counter() - t0)
    secs = time.perf_counter() - t0
    model.eval()
    save_fp16(model, out, tok)
    this_round = {"init": "mini-mlm" if init == "mlm" else "scratch", "add_layers": add_layers,
                  "hyperparameters": cfg, "steps": total, "epochs": round(total / per_epoch, 3),
                  "train_seconds": round(secs, 1), "loss_curve": losses, "final_loss": round(run_loss, 4)}
    rounds.append(this_round)
    info = {
        "name": "mini-mlm", "architecture": "RobertaForMaskedLM", "params": n_params(model), "seed": seed,
        "hyperparameters": cfg, "rounds": rounds, **_round_totals(rounds), "train_sentences": len(sentences),
        "train_blocks": len(blocks),
        "loss_curve": [[i + 1, s, l] for i, r in enumerate(rounds) for s, l in (r["loss_curve"] or [])],
        "final_loss": round(run_loss, 4), "hardware": hardware(), "data": split.summary(),
    }
    write_json(out / INFO_FILE, info)
    log.info("mini-mlm saved to %s (%.1f min)", out, secs / 60)
    return info


# ----------------------------------------------------------------------------------------------- mini-nli

def _encode_pairs(tok: Any, pairs: Sequence[Pair], max_length: int) -> list[list[int]]:
    return tok([p.premise for p in pairs], [p.hypothesis for p in pairs], truncation=True,
               max_length=max_length)["input_ids"]


@torch.inference_mode()
def classify_ids(model: Any, encoded: Sequence[Sequence[int]], pad_id: int, batch_size: int = 256) -> np.ndarray:
    """Logits (model order) for pre-tokenised inputs; length-sorted batches, original order returned."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out = np.zeros((len(encoded), model.config.num_labels), dtype=np.float32)
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        ids, mask = pad_batch([encoded[i] for i in idx], pad_id)
        out[idx] = model(input_ids=ids, attention_mask=mask).logits.float().numpy()
    return out


def nli_accuracy(model: Any, tok: Any, pairs: Sequence[Pair], max_length: int = 128) -> float:
    enc = _encode_pairs(tok, pairs, max_length)
    was_training = model.training
    model.eval()
    logits = classify_ids(model, enc, tok.pad_token_id)
    if was_training:
        model.train()
    pred = [model.config.id2label[int(i)] for i in logits.argmax(1)]
    return float(np.mean([p == q.label for p, q in zip(pred, pairs)]))


def finetune_nli(split: SnliSplit, out_dir: str | Path, seed: int = 0, max_steps: int | None = None,
                 progress: bool = True, init: str = "mlm", **hp: Any) -> dict:
    """Fine-tune ``mini-nli`` (RobertaForSequenceClassification) from the saved ``mini-mlm``; the checkpoint
    with the best accuracy on the tuning slice of the held-out pairs (:attr:`SnliSplit.tuning`) is kept (saved
    after every improvement); the evaluation slice is not read.

    ``init="nli"`` continues from the saved ``mini-nli`` instead (a second round with a fresh schedule); the
    rounds are recorded in ``train_info.json``."""
    from transformers import RobertaForSequenceClassification, RobertaTokenizerFast

    cfg = {**DEFAULTS["nli"], **{k: v for k, v in hp.items() if v is not None}}
    out_dir = Path(out_dir)
    mlm_dir, out = out_dir / "mini-mlm", out_dir / "mini-nli"
    init_dir = out if init == "nli" else mlm_dir
    previous = read_json(out / INFO_FILE, {}) if init == "nli" else {}
    seed_everything(seed + (len(previous.get("rounds", [])) + 1 if init == "nli" else 0))
    tok = RobertaTokenizerFast.from_pretrained(mlm_dir)
    model = RobertaForSequenceClassification.from_pretrained(
        init_dir, num_labels=3, id2label=dict(NLI_ID2LABEL), label2id=dict(NLI_LABEL2ID),
        hidden_dropout_prob=cfg["dropout"], attention_probs_dropout_prob=cfg["dropout"], dtype=torch.float32,
    )
    model.config.problem_type = "single_label_classification"
    train_pairs = list(split.train)
    if cfg.get("swap_contradictions"):
        # contradiction is symmetric: (hypothesis, premise) of a contradiction pair is one too; teaches the
        # classifier to answer both directions of the loop's relation filter alike
        train_pairs += [Pair(p.pair_id + "~swap", p.caption_id, p.hypothesis, p.premise, p.label)
                        for p in split.train if p.label == CONTRADICTION]
    train_enc = _encode_pairs(tok, train_pairs, cfg["max_length"])
    train_y = torch.tensor([NLI_LABEL2ID[p.label] for p in train_pairs], dtype=torch.long)
    lengths = [len(x) for x in train_enc]
    bs = cfg["batch_size"]
    per_epoch = math.ceil(len(train_enc) / bs)
    total = _total_steps(per_epoch, cfg["epochs"], max_steps)
    opt = _adamw(model, cfg["lr"], cfg["weight_decay"])
    sched = _linear_schedule(opt, int(cfg["warmup"] * total), total)
    eval_every = max(1, int(per_epoch * cfg["eval_every_epochs"]))
    gen = torch.Generator().manual_seed(seed + 2)
    log.info("mini-nli: %d train pairs, %d tuning pairs; %d params; %d steps", len(train_enc), len(split.tuning),
             n_params(model), total)
    model.train()
    t0 = time.perf_counter()
    step, run_loss, best, history = 0, 0.0, -1.0, []
    if init == "nli":  # only replace the saved model when the continuation beats it
        best = nli_accuracy(model, tok, split.tuning, cfg["max_length"])
        log.info("mini-nli: continuing from the saved model (tuning accuracy %.4f)", best)
    ema = WeightAverage(model, cfg["ema"]) if cfg.get("ema") else None
    with make_progress(progress) as bar:
        task = bar.add_task("mini-nli", total=total, info="")
        for epoch, step, idx in _training_batches(lengths, bs, gen, total):
            ids, mask = pad_batch([train_enc[i] for i in idx], tok.pad_token_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=train_y[idx]).loss
            run_loss = _train_step(model, loss, opt, sched, run_loss, step)
            if ema is not None:
                ema.update(model)
            bar.update(task, advance=1, info=f"ep {epoch} loss {run_loss:.3f} best {max(best, 0):.3f}")
            if step % 100 == 0:
                log.info("mini-nli epoch %d step %d/%d loss %.4f (%.0f s)", epoch, step, total, run_loss,
                         time.perf_counter() - t0)
            if step % eval_every == 0 or step == total:
                acc = nli_accuracy(model, tok, split.tuning, cfg["max_length"])
                point = {"epoch": round(step / per_epoch, 2), "step": step, "loss": round(run_loss, 4),
                         "tuning_accuracy": round(acc, 4)}
                log.info("mini-nli epoch %.2f: tuning accuracy %.4f (loss %.4f)", step / per_epoch, acc, run_loss)
                if acc > best:
                    best = acc
                    save_fp16(model, out, tok)
                    log.info("mini-nli: saved the new best to %s", out)
                if ema is not None:  # the averaged weights are a second candidate, judged the same way
                    with ema.swapped_in(model):
                        acc_ema = nli_accuracy(model, tok, split.tuning, cfg["max_length"])
                        point["tuning_accuracy_ema"] = round(acc_ema, 4)
                        log.info("mini-nli epoch %.2f: tuning accuracy of the weight average %.4f", step / per_epoch,
                                 acc_ema)
                        if acc_ema > best:
                            best = acc_ema
                            save_fp16(model, out, tok)
                            point["saved"] = "ema"
                            log.info("mini-nli: saved the weight average as the new best to %s", out)
                history.append(point | {"seconds": round(time.perf_counter() - t0, 1)})
    secs = time.perf_counter() - t0
    # accuracy after the fp16 round trip, loaded from the saved folder in fp32
    reloaded = RobertaForSequenceClassification.from_pretrained(out)
    acc16 = nli_accuracy(reloaded, RobertaTokenizerFast.from_pretrained(out), split.tuning, cfg["max_length"])
    this_round = {"init": "mini-nli" if init == "nli" else "mini-mlm", "hyperparameters": cfg, "steps": total,
                  "epochs": round(total / per_epoch, 3), "history": history, "train_seconds": round(secs, 1),
                  "best_tuning_accuracy_fp32": round(best, 4)}
    rounds = _earlier_rounds(previous, ("hyperparameters", "steps", "history", "train_seconds", "best_tuning_accuracy_fp32"),
                             init="mini-mlm", epochs=previous.get("epochs_done"))
    rounds.append(this_round)
    info = {
        "name": "mini-nli", "architecture": "RobertaForSequenceClassification", "init": "mini-mlm",
        "rounds": rounds, "params": n_params(model), "seed": seed, "hyperparameters": cfg,
        **_round_totals(rounds), "train_pairs": len(train_enc), "tuning_pairs": len(split.tuning),
        "history": [h | {"round": i + 1} for i, r in enumerate(rounds) for h in (r["history"] or [])],
        "best_tuning_accuracy_fp32": round(best, 4), "tuning_accuracy": round(acc16, 4),
        "hardware": hardware(), "data": split.summary(),
        "id2label": NLI_ID2LABEL,
    }
    write_json(out / INFO_FILE, info)
    log.info("mini-nli: tuning accuracy after the fp16 round trip %.4f (%.1f min)", acc16, secs / 60)
    return info


# ----------------------------------------------------------------------------------------------- mini-t5

def t5_examples(pairs: Sequence[Pair], seed: int = 0, nli_fraction: float = 1.0,
                gen_fraction: float = 1.0) -> list[tuple[str, str, str]]:
    """(task, input, target) triples built from training pairs with the prompts of ``breaknli_fast.prompts``.

    Per premise (caption): contradiction - premise -> C hyp, C hyp -> premise, E hyp <-> C hyp;
    entailment/paraphrase - premise -> E hyp, E hyp -> other E hyp; NLI - the ``infer`` prompt -> yes / no /
    it is not possible to tell for a random ``nli_fraction`` of the pairs. Shuffled with ``seed``."""
    groups: dict[str, dict[str, Any]] = defaultdict(lambda: {"premise": None, ENTAILMENT: [], NEUTRAL: [],
                                                             CONTRADICTION: []})
    out: list[tuple[str, str, str]] = []
    pick = random.Random(seed + 7)
    for p in pairs:
        g = groups[p.caption_id]
        g["premise"] = g["premise"] or p.premise
        if p.hypothesis not in g[p.label]:
            g[p.label].append(p.hypothesis)
        if nli_fraction < 1.0 and pick.random() >= nli_fraction:
            continue
        out.append(("nli", NLI_PROMPTS["infer"].format(premise=p.premise, hypothesis=p.hypothesis),
                    NLI_ANSWERS[p.label]))
    for cap in groups:
        g = groups[cap]
        prem, ents, cons = g["premise"], g[ENTAILMENT], g[CONTRADICTION]
        for c in cons:
            out.append(("contradict", CONTRADICT_PROMPT.format(h=prem), c))
            out.append(("contradict", CONTRADICT_PROMPT.format(h=c), prem))
            for e in ents:
                out.append(("contradict", CONTRADICT_PROMPT.format(h=e), c))
                out.append(("contradict", CONTRADICT_PROMPT.format(h=c), e))
        for e in ents:
            out.append(("entail", ENTAIL_PROMPT.format(h=prem), e))
            for e2 in ents:
                if e2 != e:
                    out.append(("entail", ENTAIL_PROMPT.format(h=e), e2))
    if gen_fraction < 1.0:
        keep = random.Random(seed + 11)
        out = [x for x in out if x[0] == "nli" or keep.random() < gen_fraction]
    random.Random(seed).shuffle(out)
    return out


DENOISE_PROMPT = "Fill in the missing words: {h}"
DENOISE_MASK = "___"


def corrupt_sentence(sentence: str, rng: random.Random, rate: float = 0.3) -> str:
    """``sentence`` with about ``rate`` of its words hidden in one or two spans, each replaced by ``DENOISE_MASK``
    (at least one word hidden; the final punctuation is kept)."""
    words = sentence.split()
    n = len(words)
    k = max(1, min(n - 1, round(rate * n))) if n > 1 else 1
    spans = 2 if k >= 2 and rng.random() < 0.5 else 1
    lens = [k] if spans == 1 else [k // 2, k - k // 2]
    hidden: set[int] = set()
    for ln in lens:
        start = rng.randrange(0, max(1, n - ln + 1))
        hidden.update(range(start, start + ln))  # start <= n - ln
    out: list[str] = []
    for i, w in enumerate(words):
        if i in hidden:
            if not out or out[-1] != DENOISE_MASK:
                out.append(DENOISE_MASK)
            if i == n - 1 and w[-1:] in ".?!":
                out[-1] += w[-1]
        else:
            out.append(w)
    return " ".join(out)


def denoise_examples(split: SnliSplit, n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` reconstruction examples (BART-style text infilling): a training sentence with a span or two of its
    words hidden -> the whole sentence. mini-t5 was instruction-tuned from random weights, with nothing like the
    span-corruption pre-training Flan-T5 starts from; this teaches its decoder to copy its input, which a
    paraphrase needs. Hypotheses first (the loop rephrases hypotheses), then premises, each list in a seeded order."""
    hyps = sorted({p.hypothesis.strip() for p in split.train})
    prems = sorted({p.premise.strip() for p in split.train} - set(hyps))
    rng = random.Random(seed + 19)
    rng.shuffle(hyps)
    rng.shuffle(prems)
    return [("denoise", DENOISE_PROMPT.format(h=corrupt_sentence(s, rng)), s) for s in (hyps + prems)[:n]]


def bi_entailed_examples(split: SnliSplit, out_dir: str | Path, seed: int = 0, human: bool = True,
                         hypotheses: int = 0, k: int = 20, per_hypothesis: int = 3, rules: int = 0,
                         rules_per_hypothesis: int = 2, rules_max_edits: int = 2, rules_extended: bool = False,
                         rules_rich: bool = False, faithful: bool = False, self_temperature: float = 1.0,
                         progress: bool = True) -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """Paraphrase examples that the saved ``mini-nli`` labels entailment in *both* directions (the entailed
    mode's relation filter), from the training split only:

    * ``human``: the SNLI paraphrase examples of :func:`t5_examples` (premise -> entailed hypothesis,
      entailed hypothesis -> another of the same premise) whose source and target pass;
    * ``hypotheses`` > 0: self-generated -- the saved ``mini-t5`` samples ``k`` rephrasings of that many
      training hypotheses (the entailed prompt, the loop's default decoding, one seed per hypothesis), and
      up to ``per_hypothesis`` distinct candidates that pass (and differ from the hypothesis) are kept
      (``self_temperature`` other than 1.0 samples them hotter or colder than the loop does);
    * ``rules`` > 0: rule-based rewrites (:mod:`breaknli_fast.mini.paraphrase_rules`: synonyms, "is sleeping" /
      "sleeps", "There is a man sleeping") of that many other training hypotheses, ``rules_per_hypothesis``
      candidates each, of 1..``rules_max_edits`` edits (``rules_extended``: the larger synonym table and the
      leading "The" / "A" swap as well; ``rules_rich``: a third synonym table, "a" / "the" inside the sentence,
      a final place phrase moved to the front and "A man and a woman" / "A woman and a man" as well); the ones
      that pass are kept.

    ``faithful``: SNLI's and mini-t5's own candidates must also keep every content word of their source
    (:func:`breaknli_fast.mini.paraphrase_rules.keeps_content`) before mini-nli judges them; the rules keep them
    by construction.

    Returns ``("entail_both_ways", prompt, target)`` triples and counts."""
    out_dir = Path(out_dir)
    clf = NliClassifier(out_dir / "mini-nli")
    cands: list[tuple[str, str]] = []
    stats: dict[str, Any] = {}
    if human:
        prefix = ENTAIL_PROMPT.format(h="")
        cands += [(x[len(prefix):], y) for t, x, y in t5_examples(split.train, seed) if t == "entail"]
        stats["human_candidates"] = len(cands)
        if faithful:
            cands = [(x, y) for x, y in cands if keeps_content(x, y)]
            stats["human_faithful"] = len(cands)
    n_human = len(cands)
    # the training hypotheses in a seeded order: mini-t5 rephrases the first ``hypotheses``, the rules the next ``rules``
    order = sorted({normalize_text(p.hypothesis) for p in split.train}) if hypotheses or rules else []
    random.Random(seed + 13).shuffle(order)
    if hypotheses:
        hyps = order[:hypotheses]
        gen = load_generator("torch", str(out_dir / "mini-t5"))
        t0, n_self = time.perf_counter(), 0
        with make_progress(progress) as bar:
            task = bar.add_task("self-paraphrases", total=len(hyps), info="")
            for b in range(0, len(hyps), 64):
                part = hyps[b:b + 64]
                outs = gen.generate([ENTAIL_PROMPT.format(h=h) for h in part], k, Decoding(temperature=self_temperature),
                                    [derive_seed(seed, "self-paraphrase", h) for h in part])
                for h, cs in zip(part, outs):
                    distinct = dedup_candidates(h, cs, len(cs))[0]
                    n_self += len(distinct)
                    cands += [(h, c) for c in distinct if not faithful or keeps_content(h, c)]
                bar.update(task, advance=len(part))
        stats.update(self_hypotheses=len(hyps), self_candidates=n_self,
                     self_generation_seconds=round(time.perf_counter() - t0, 1))
        if faithful:
            stats["self_faithful"] = len(cands) - n_human
    n_before_rules = len(cands)
    if rules:
        hyps = order[hypotheses:hypotheses + rules]  # not the ones rephrased by mini-t5 above
        rng = random.Random(seed + 17)
        for h in hyps:
            cands += [(h, c) for c in rule_paraphrases(h, rng, rules_per_hypothesis, rules_max_edits,
                                                       rules_extended, rules_rich)]
        stats.update(rule_hypotheses=len(hyps), rule_candidates=len(cands) - n_before_rules)
    forward = clf.predict(cands)
    backward = clf.predict([(y, x) for x, y in cands])
    out: list[tuple[str, str, str]] = []
    per: dict[str, int] = defaultdict(int)
    kept = {"human": 0, "self": 0, "rules": 0}
    for i, ((x, y), f, b) in enumerate(zip(cands, forward, backward)):
        if f != ENTAILMENT or b != ENTAILMENT:
            continue
        if n_human <= i < n_before_rules:
            if per[x] >= per_hypothesis:
                continue
            per[x] += 1
        kept["human" if i < n_human else "self" if i < n_before_rules else "rules"] += 1
        out.append(("entail_both_ways", ENTAIL_PROMPT.format(h=x), y))
    stats.update(kept_human=kept["human"], kept_self=kept["self"])
    if rules:
        stats["kept_rules"] = kept["rules"]
    log.info("bi-entailed paraphrase examples: %s", stats)
    return out, stats


def _bucket_batches(lengths: Sequence[int], batch_size: int, gen: torch.Generator, bucket: int = 50) -> list[list[int]]:
    """Random batches of similar length: shuffle, sort within windows of ``bucket`` batches, shuffle the batches."""
    perm = torch.randperm(len(lengths), generator=gen).tolist()
    batches: list[list[int]] = []
    win = batch_size * bucket
    for w in range(0, len(perm), win):
        chunk = sorted(perm[w:w + win], key=lambda i: lengths[i])
        batches.extend(chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size))
    order = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[i] for i in order]


def _training_batches(lengths: Sequence[int], batch_size: int, gen: torch.Generator, total: int):
    """``(epoch, step, indices)`` of every training step, 1-based: length-bucketed random batches
    (:func:`_bucket_batches`, drawn afresh from ``gen`` at the start of each epoch), epoch after epoch,
    until ``total`` steps."""
    step, epoch = 0, 0
    while step < total:
        epoch += 1
        for idx in _bucket_batches(lengths, batch_size, gen):
            if step >= total:
                return
            step += 1
            yield epoch, step, idx


def train_t5(split: SnliSplit, out_dir: str | Path, tok: Any | None = None, seed: int = 0,
             max_steps: int | None = None, progress: bool = True, init: str = "scratch", **hp: Any) -> dict:
    """Instruction-tune ``mini-t5`` (T5ForConditionalGeneration, T5 v1.1 / Flan-T5 architecture) from scratch.

    ``init="t5"`` continues from the saved ``mini-t5`` (a further round with a fresh schedule and its own task
    mix, e.g. more NLI: ``nli_fraction=1.0, gen_fraction=0.25``); rounds are recorded in ``train_info.json``."""
    from transformers import T5ForConditionalGeneration, T5TokenizerFast

    from breaknli_fast.engines.compat import new_untied_t5

    cfg = {**DEFAULTS["t5"], **{k: v for k, v in hp.items() if v is not None}}
    out = Path(out_dir) / "mini-t5"
    tok = tok or T5TokenizerFast.from_pretrained(out)
    previous = read_json(out / INFO_FILE, {}) if init == "t5" else {}
    rounds = _earlier_rounds(previous, ("hyperparameters", "steps", "epochs_done", "examples_by_task",
                                        "train_seconds", "final_loss"), init="scratch")
    seed_everything(seed + len(rounds))
    examples = t5_examples(split.train, seed + len(rounds), cfg["nli_fraction"], cfg.get("gen_fraction", 1.0))
    if cfg.get("bi_entailed"):  # paraphrases that mini-nli accepts both ways (needs the saved mini-nli)
        extra, cfg["bi_entailed_counts"] = bi_entailed_examples(split, out_dir, seed=seed, progress=progress,
                                                                 **cfg["bi_entailed"])
        examples = examples + extra
        random.Random(seed + len(rounds)).shuffle(examples)
        seed_everything(seed + len(rounds))  # loading and running the models above drew from the global RNGs
    if cfg.get("denoise"):
        examples = examples + denoise_examples(split, cfg["denoise"], seed=seed + len(rounds))
        random.Random(seed + len(rounds) + 1).shuffle(examples)
    counts: dict[str, int] = defaultdict(int)
    for t, _, _ in examples:
        counts[t] += 1
    src = tok([x for _, x, _ in examples], truncation=True, max_length=cfg["max_input"])["input_ids"]
    tgt = tok([y for _, _, y in examples], truncation=True, max_length=cfg["max_target"])["input_ids"]
    config = dict(  # T5 v1.1: an untied output layer (new_untied_t5: on transformers 5.x too)
        vocab_size=len(tok), d_model=cfg["d_model"], d_kv=cfg["d_kv"], d_ff=cfg["d_ff"],
        num_layers=cfg["enc_layers"], num_decoder_layers=cfg["dec_layers"], num_heads=cfg["heads"],
        relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=cfg["dropout"],
        feed_forward_proj="gated-gelu", is_encoder_decoder=True,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
        layer_norm_epsilon=1e-6, initializer_factor=1.0,
    )
    if init == "t5":
        model = T5ForConditionalGeneration.from_pretrained(out, dtype=torch.float32)
    else:
        model = new_untied_t5(**config)
        # untied output layer: start with logits of unit scale (HF initialises it with std 1.0, loss ~40 at step 0)
        torch.nn.init.normal_(model.lm_head.weight, std=cfg["d_model"] ** -0.5)
    model.generation_config.decoder_start_token_id = tok.pad_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.train()
    gen = torch.Generator().manual_seed(seed + 3)
    lengths = [len(s) + len(t) for s, t in zip(src, tgt)]
    bs = cfg["batch_size"]
    per_epoch = math.ceil(len(src) / bs)
    total = _total_steps(per_epoch, cfg["epochs"], max_steps)
    opt = _adamw(model, cfg["lr"], cfg["weight_decay"], betas=(0.9, 0.999))
    sched = _linear_schedule(opt, min(cfg["warmup_steps"], total // 10 + 1), total)
    log.info("mini-t5: %d examples %s; %d params; %d steps", len(src), dict(counts), n_params(model), total)
    t0 = time.perf_counter()
    step, run_loss, losses = 0, 0.0, []

    def checkpoint(final: bool = False) -> None:
        model.eval()
        save_fp16(model, out, tok)
        this = {"init": "mini-t5" if init == "t5" else "scratch", "hyperparameters": cfg, "steps": step,
                "epochs_done": round(step / per_epoch, 3), "examples_by_task": dict(counts),
                "train_seconds": round(time.perf_counter() - t0, 1), "final_loss": round(run_loss, 4)}
        all_rounds = rounds + [this]
        write_json(out / INFO_FILE, {
            "name": "mini-t5", "architecture": "T5ForConditionalGeneration (T5 v1.1 / Flan-T5: gated-gelu, untied)",
            "params": n_params(model), "seed": seed, "hyperparameters": cfg,
            **_round_totals(all_rounds, "epochs_done"), "planned_steps": total, "examples": len(src),
            "examples_by_task": dict(counts), "rounds": all_rounds if len(all_rounds) > 1 else [],
            "loss_curve": losses, "final_loss": round(run_loss, 4), "complete": final, "hardware": hardware(),
            "data": split.summary(),
        })
        model.train()
        log.info("mini-t5: checkpoint at step %d saved to %s", step, out)

    with make_progress(progress) as bar:
        task = bar.add_task("mini-t5", total=total, info="")
        for epoch, step, idx in _training_batches(lengths, bs, gen, total):
            ids, mask = pad_batch([src[i] for i in idx], tok.pad_token_id)
            labels, lmask = pad_batch([tgt[i] for i in idx], tok.pad_token_id)
            labels[lmask == 0] = -100
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            run_loss = _train_step(model, loss, opt, sched, run_loss, step)
            bar.update(task, advance=1, info=f"ep {epoch} loss {run_loss:.3f}")
            if step % 100 == 0 or step == total:
                losses.append((step, round(run_loss, 4)))
                log.info("mini-t5 epoch %d step %d/%d loss %.4f (%.0f s)", epoch, step, total, run_loss,
                         time.perf_counter() - t0)
            if cfg["save_every"] and step % cfg["save_every"] == 0 and step < total:
                checkpoint()
    checkpoint(final=True)
    info = read_json(out / INFO_FILE)
    log.info("mini-t5 done (%.1f min)", info["train_seconds"] / 60)
    return info


# ----------------------------------------------------------------------------------------------- driver

def train_all(data_path: str | Path, out_dir: str | Path = DEFAULT_OUT, seed: int = 0, threads: int | None = None,
              mlm_epochs: float | None = None, nli_epochs: float | None = None, t5_epochs: float | None = None,
              only: str | None = None, mlm_init: str = "scratch", mlm_add_layers: int = 0, mlm_round2: bool = True,
              nli_ema: float | None = None, max_steps: int | None = None, sample_dir: str | Path | None = None,
              evaluate: bool = True, n_gen: int = 200, progress: bool = True, nli_init: str = "mlm",
              nli_lr: float | None = None, nli_dropout: float | None = None, nli_swap: bool = False, t5_init: str = "scratch", t5_nli_fraction: float | None = None,
              t5_gen_fraction: float | None = None, t5_lr: float | None = None, t5_round2: bool = True,
              t5_save_every: int | None = None, nli_round2: bool = True, t5_bi_entailed: dict | None = None,
              t5_denoise: int | None = None) -> dict:
    """Train everything in order (tokenizers, mini-mlm, mini-nli, mini-t5) into ``out_dir``, then evaluate and write
    the cards. ``sample_dir``: where to write the embedded sample and its card (``None``: not written); the
    evaluation reads ``sample_dir/snli_sample.jsonl`` when it exists, else the held-out dev pairs. The shipped
    models and sample are :data:`breaknli_fast.mini.MODELS_DIR` and :data:`breaknli_fast.mini.DATA_DIR`.

    ``only``: ``sample`` | ``tokenizers`` | ``mlm`` | ``nli`` (mini-mlm must exist) | ``t5`` | ``eval``.
    Each stage is trained in the rounds of the recipe (:data:`DEFAULTS`, from ``recipe.json``): mini-mlm
    ``DEFAULTS["mlm"]`` from scratch, then each of ``DEFAULTS["mlm_more_rounds"]`` (``mlm_round2=False`` skips
    them); mini-nli ``DEFAULTS["nli"]`` from mini-mlm, then ``DEFAULTS["nli_more_rounds"]`` from the best mini-nli
    (``nli_round2=False`` skips them); mini-t5 ``DEFAULTS["t5"]`` from scratch, then ``DEFAULTS["t5_more_rounds"]``
    (more NLI, the generation tasks, then the paraphrase rounds with text infilling; ``t5_round2=False`` skips
    them). Every further round continues from the model the round before saved.
    ``max_steps`` caps every training stage (smoke tests)."""
    nthreads = set_threads(threads)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(seed)
    t0 = time.perf_counter()
    split = load_split(data_path)
    log.info("data: %s", split.summary())
    log.info("torch threads: %d", nthreads)
    result: dict[str, Any] = {"data": split.summary()}
    if sample_dir is not None and only in (None, "sample"):
        result["sample"] = str(write_sample(data_path, sample_dir))
        log.info("sample written to %s", result["sample"])
    if only in (None, "tokenizers", "mlm") and mlm_init == "scratch":
        toks = train_tokenizers(split, out_dir, which=("bpe",), seed=seed)
    if only in (None, "mlm"):
        result["mini-mlm"] = pretrain_mlm(split, out_dir, tok=toks["bpe"] if mlm_init == "scratch" else None,
                                          seed=seed, max_steps=max_steps, progress=progress, init=mlm_init,
                                          add_layers=mlm_add_layers, epochs=mlm_epochs)
        if mlm_init == "scratch" and mlm_round2:
            for extra in DEFAULTS["mlm_more_rounds"]:
                result["mini-mlm"] = pretrain_mlm(split, out_dir, seed=seed, max_steps=max_steps, progress=progress,
                                                  init="mlm", **extra)
    if only in (None, "nli"):
        result["mini-nli"] = finetune_nli(split, out_dir, seed=seed, max_steps=max_steps, progress=progress,
                                          init=nli_init, epochs=nli_epochs, lr=nli_lr,
                                          dropout=nli_dropout, swap_contradictions=nli_swap or None, ema=nli_ema)
        if nli_init == "mlm" and nli_round2:
            for extra in DEFAULTS["nli_more_rounds"]:
                result["mini-nli"] = finetune_nli(split, out_dir, seed=seed, max_steps=max_steps, progress=progress,
                                                  init="nli", **({"ema": nli_ema} | extra))
    if only in (None, "tokenizers", "t5"):
        spm_tok = train_tokenizers(split, out_dir, which=("spm",), seed=seed)["spm"]
    if only in (None, "t5"):
        result["mini-t5"] = train_t5(split, out_dir, tok=spm_tok, seed=seed, max_steps=max_steps, progress=progress,
                                     init=t5_init, epochs=t5_epochs, nli_fraction=t5_nli_fraction,
                                     gen_fraction=t5_gen_fraction, lr=t5_lr, save_every=t5_save_every,
                                     bi_entailed=t5_bi_entailed, denoise=t5_denoise)
        if t5_init == "scratch" and t5_round2:
            for extra in DEFAULTS["t5_more_rounds"]:
                result["mini-t5"] = train_t5(split, out_dir, tok=spm_tok, seed=seed, max_steps=max_steps,
                                             progress=progress, init="t5", **extra)
    if evaluate and only in (None, "eval", "nli", "t5"):
        result["eval"] = evaluate_models(out_dir, split, seed=seed, n_gen=n_gen, progress=progress,
                                         sample=sample_dir and Path(sample_dir) / "snli_sample.jsonl")
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    result["models_size_bytes"] = folder_size(out_dir)
    log.info("all done in %.1f min; %s is %.1f MB", result["total_seconds"] / 60, out_dir,
             result["models_size_bytes"] / 1e6)
    return result


if __name__ == "__main__":  # the options are read by the command line (breaknli_fast.mini.command)
    sys.exit("error: the training command is `breaknli-fast mini train` (breaknli-fast mini train -h for its options)")
