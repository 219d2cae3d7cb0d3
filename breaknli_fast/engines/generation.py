"""Generation shared by every engine whose model offers Hugging Face's ``generate``
(torch models, optimum's ORT seq2seq models): one seed per prompt, so candidates do not
depend on batching, and a resumed or re-run example gets exactly the same candidates."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from breaknli_fast.engines.base import Decoding, EngineInfo


def diverse_beam_search(model: Any, enc: dict[str, torch.Tensor], n: int, decoding: Decoding, start_id: int,
                        eos_id: int, pad_id: int) -> list[list[int]]:
    """Diverse (group) beam search of Vijayakumar et al. (2018), as transformers' former
    ``_group_beam_search`` did it (that code now lives in a hub repository we do not download):
    ``num_beams`` beams in ``num_beam_groups`` groups; at each step the groups choose in turn, and a
    group's log-probabilities are lowered by ``diversity_penalty`` times the number of times earlier
    groups chose each token at this step (Hamming diversity). Finished hypotheses are scored
    ``sum log p / length`` (length penalty 1.0, eos counted) and the best ``n`` over all groups are
    returned. One input; the decoder is re-run on whole prefixes (no cache), which is simple and
    exact for the short statements generated here."""
    from transformers.modeling_outputs import BaseModelOutput

    beams = max(decoding.num_beams or n, n)
    groups = decoding.num_beam_groups or beams
    if beams % groups:
        raise ValueError(f"diverse-beam: num_beams ({beams}) must be a multiple of num_beam_groups ({groups})")
    per = beams // groups
    lp = 1.0
    with torch.inference_mode():
        enc_out = model.get_encoder()(**enc) if hasattr(model, "get_encoder") else None
        hidden = enc_out[0] if enc_out is not None else None
        # running beams per group: list of (token list, summed score)
        running = [[([], 0.0)] + [([], float("-inf"))] * (per - 1) for _ in range(groups)]
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(groups)]
        done = [False] * groups
        for step in range(decoding.max_new_tokens):
            if all(done):
                break
            active = [g for g in range(groups) if not done[g]]
            prefixes = [[start_id] + toks for g in active for toks, _ in running[g]]
            dec = torch.tensor(prefixes, dtype=torch.long, device=enc["input_ids"].device)
            rep = dec.shape[0]
            kwargs = {"attention_mask": enc["attention_mask"].expand(rep, -1), "decoder_input_ids": dec}
            if hidden is not None:
                kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden.expand(rep, -1, -1))
            else:
                kwargs["input_ids"] = enc["input_ids"].expand(rep, -1)
            logits = model(**kwargs).logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            if step < decoding.min_new_tokens:
                logprobs[:, eos_id] = float("-inf")
            vocab = logprobs.shape[-1]
            chosen_this_step = torch.zeros(vocab, device=logprobs.device)
            for row, g in enumerate(active):
                lpg = logprobs[row * per : (row + 1) * per] - decoding.diversity_penalty * chosen_this_step
                scores = torch.tensor([sc for _, sc in running[g]], device=lpg.device).unsqueeze(1) + lpg
                top_scores, top_idx = torch.topk(scores.view(-1), min(2 * per, scores.numel()))
                new_running: list[tuple[list[int], float]] = []
                for rank, (sc, flat) in enumerate(zip(top_scores.tolist(), top_idx.tolist())):
                    if sc == float("-inf"):
                        break
                    b, tok = divmod(flat, vocab)
                    seq = running[g][b][0] + [tok]
                    if tok == eos_id:
                        if rank < per:
                            finished[g].append((sc / (len(seq) ** lp), seq))
                            finished[g].sort(key=lambda x: -x[0])
                            del finished[g][per:]
                        continue
                    new_running.append((seq, sc))
                    if len(new_running) == per:
                        break
                for seq, _ in new_running:
                    chosen_this_step[seq[-1]] += 1
                filler = new_running[0][0] if new_running else running[g][0][0] + [pad_id]
                while len(new_running) < per:  # dead beams keep the prefix length uniform
                    new_running.append((filler, float("-inf")))
                running[g] = new_running
                if len(finished[g]) >= per:
                    best_possible = running[g][0][1] / ((step + 1) ** lp)
                    done[g] = finished[g][-1][0] >= best_possible
        for g in range(groups):
            if not done[g]:
                for seq, sc in running[g]:
                    if sc > float("-inf"):
                        finished[g].append((sc / (len(seq) ** lp), seq))
                finished[g].sort(key=lambda x: -x[0])
                del finished[g][per:]
    pool = sorted((h for g in finished for h in g), key=lambda x: -x[0])
    return [seq for _, seq in pool[:n]]


@dataclass
class GeneratorStats:
    prompts: int = 0
    sequences: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    call_seconds: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.prompts = self.sequences = self.new_tokens = 0
        self.seconds = 0.0
        self.call_seconds = []


def _cut(tokens: list[int], eos: int, pad: int) -> list[int]:
    """Tokens up to and including the first eos, without padding (HF pads finished rows)."""
    out = []
    for t in tokens:
        if t == pad:
            continue
        out.append(t)
        if t == eos:
            break
    return out


class HFGenerator:
    """A :class:`~breaknli_fast.engines.base.Generator` over any model with HF ``generate``."""

    def __init__(self, model: Any, tokenizer: Any, info: EngineInfo, device: str = "cpu", max_input_length: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.max_input_length = max_input_length
        self.stats = GeneratorStats()

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[list[int]]]:
        """Generated token ids (without the decoder start token and padding), ``n`` per prompt."""
        if len(seeds) != len(prompts):
            raise ValueError("one seed per prompt is required")
        kw = decoding.hf_kwargs(n) if decoding.strategy != "diverse-beam" else {}
        pad = self.tokenizer.pad_token_id
        out: list[list[list[int]]] = []
        for prompt, seed in zip(prompts, seeds):
            enc = self.tokenizer([prompt], return_tensors="pt", truncation=True, max_length=self.max_input_length)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            t0 = time.perf_counter()
            torch.manual_seed(int(seed))
            if decoding.strategy == "diverse-beam":
                cfg = self.model.config
                rows = diverse_beam_search(self.model, enc, n, decoding, int(cfg.decoder_start_token_id or 0),
                                           int(cfg.eos_token_id), int(pad))
            else:
                with torch.inference_mode():
                    seqs = self.model.generate(**enc, **kw)
                rows = [_cut(row[1:].tolist(), int(self.model.config.eos_token_id), int(pad)) for row in seqs.detach().cpu()]
            self._synchronize()
            dt = time.perf_counter() - t0
            self.stats.new_tokens += sum(len(r) for r in rows)
            self.stats.prompts += 1
            self.stats.sequences += len(rows)
            self.stats.seconds += dt
            self.stats.call_seconds.append(dt)
            out.append(rows)
        return out

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        ids = self.generate_ids(prompts, n, decoding, seeds)
        return [[t.strip() for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)] for rows in ids]

    def count_tokens(self, texts: Iterable[str]) -> int:
        return sum(len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])
