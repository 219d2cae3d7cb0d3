"""A T5 generator's stepper over the project's two T5 step graphs (an encoder graph that returns every decoder layer's
cross-attention keys / values, a decoder-step graph with top-k and full-logits outputs; exported by the ort backend's
``t5`` module), numpy in, numpy out, on any runtime whose sessions answer ``run(output_names, feeds)``,
``get_inputs()`` and ``get_outputs()`` as ONNX Runtime's do. Sampling (:mod:`breaknli_fast.engines.sampling`),
greedy and beam search (:mod:`breaknli_fast.engines.decoding`) and Flan-T5 as an NLI classifier all step through
it; the ort engine runs it on ONNX Runtime sessions, the openvino engine on compiled OpenVINO models. Also the
masked-LM graph behind the mask-filler contract (:class:`GraphMaskFiller`) and the numpy feeds of a graph
(:func:`graph_feeds`).
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

from breaknli_fast.engines.base import MASK_FILLER, EngineInfo
from breaknli_fast.engines.batching import BatchedMaskFiller
from breaknli_fast.engines.fill_mask import HFMaskFillerMixin
from breaknli_fast.engines.backend import EngineUnavailable
from breaknli_fast.engines.model_info import ModelLoadError

# the graph files of the project's T5 export (the names the ort backend's exporter writes; other runtimes' formats
# keep the stems)
STEP_ENCODER = "step_encoder_model.onnx"
STEP_DECODER = "step_decoder_model.onnx"
STEP_GRAPHS = (STEP_ENCODER, STEP_DECODER)
# the step decoder's self-attention cache grows by this many positions at a time (its empty slots are masked)
CACHE_CHUNK = 8
FLOOR = float(np.finfo(np.float32).min)  # transformers' mask value


def graph_feeds(enc: Any, inputs: Any) -> dict[str, Any]:
    """A padded encoding (arrays) restricted to a graph's inputs (objects with ``.name``), as int64; a
    ``token_type_ids`` input the tokenizer does not produce is fed zeros."""
    feeds = {}
    for meta in inputs:
        name = meta.name
        if name in enc:
            feeds[name] = np.asarray(enc[name]).astype(np.int64, copy=False)
        elif name == "token_type_ids":
            feeds[name] = np.zeros_like(enc["input_ids"], dtype=np.int64)
        else:
            raise EngineUnavailable(f"the graph needs an input {name!r} that the tokenizer does not produce")
    return feeds


class GraphMaskFiller(HFMaskFillerMixin, BatchedMaskFiller):
    """A masked-LM graph (inputs as the tokenizer produces them and ``mask_index``; output ``log_probs``, as the
    exporters write it) on a runtime's session, behind the mask-filler contract."""

    cpu_max_batch = 16
    cpu_batch_multiple = 2  # as the ort classifier's: two workers side by side on the CPU

    def __init__(self, session: Any, details: dict[str, Any], tokenizer: Any, model_vocab_size: int, max_length: int,
                 device: str = "cpu", workers: int = 1, token_budget: int = 8192, max_batch: int | None = None,
                 info: EngineInfo | None = None):
        super().__init__(token_budget=token_budget, max_batch=max_batch, workers=workers, device=device)
        self._setup_tokenizer(tokenizer, max_length, model_vocab_size)
        self.session = session
        self.inputs = [i for i in self.session.get_inputs() if i.name != "mask_index"]
        self.device = device
        self.info = info or EngineInfo("graph", MASK_FILLER, "", "fp32", device, {})
        self.info.details.update(details)

    def _run(self, arrays: dict[str, np.ndarray], mask_index: np.ndarray) -> np.ndarray:
        feeds = graph_feeds(arrays, self.inputs)
        feeds["mask_index"] = mask_index.astype(np.int64, copy=False)
        return np.asarray(self.session.run(["log_probs"], feeds)[0], dtype=np.float32)


class StepGraphStepper:
    """The stepper of a T5 generator over the project's two step graphs, called directly on a runtime's sessions.

    :meth:`start` runs the encoder once per *prompt* (with every decoder layer's cross-attention keys / values);
    each step then feeds one token per live row and returns either the full logits (:meth:`step`: greedy and beam
    search, the ``transformers`` sampler, NLI scoring) or only the top ``k`` (:meth:`step_topk`: the ``fast``
    sampler), both from the same decoder graph, which computes only what is asked for beyond the shared work.
    Each row attends to its own prompt's cross-attention keys only; the self-attention cache lives in buffers that
    grow by :data:`CACHE_CHUNK` positions (the graph returns each step's new keys / values, written in place).
    :meth:`keep` drops or reorders rows (beam search reorders within a prompt; rows stay grouped by prompt, in
    ascending prompt order)."""

    supports_topk = True

    def __init__(self, folder: Any, open_session: Callable[[Path], tuple[Any, dict[str, Any]]],
                 files: tuple[str, str] = STEP_GRAPHS, what: str = "T5 step-graph"):
        """``open_session(path)`` -> (session, details): a session of the runtime over one graph file; ``files``: the
        encoder's and the decoder's graph files in ``folder``."""
        self.folder = Path(folder)
        missing = [f for f in files if not (self.folder / f).is_file()]
        if missing:
            raise ModelLoadError(f"{self.folder}: not a {what} export ({', '.join(missing)} missing); export it again "
                                 "with breaknli-fast export")
        self._open_session = open_session
        self._encoder_file, self._decoder_file = files
        self._lock = threading.Lock()  # forks share the sessions
        self._sessions: dict[str, Any] = {}
        self._outputs: dict[str, list[str]] = {}
        self._session_details: dict[str, Any] = {}  # session options and providers (the same for every graph)
        self._ids: np.ndarray | None = None
        self.vocab_size = int(json.loads((self.folder / "config.json").read_text())["vocab_size"])
        for name in files:  # a broken graph fails at load, not mid-run
            self._session(name)
        dec = self._sessions[self._decoder_file]
        self._new_names = [o for o in self._outputs[self._decoder_file] if o.startswith("new_")]
        self._cache_names = [i.name for i in dec.get_inputs() if i.name.startswith("cache_")]
        self._topk_out = ["top_values", "top_ids", *self._new_names]
        self._logits_out = ["logits", *self._new_names]
        self.details = {**self._session_details,
                        "decoder": "the project's T5 graphs (per-prompt cross-attention; top-k or full logits)"}

    def _session(self, name: str) -> Any:
        with self._lock:
            if name not in self._sessions:
                sess, details = self._open_session(self.folder / name)
                self._session_details.update(details)
                self._outputs[name] = [o.name for o in sess.get_outputs()]
                self._sessions[name] = sess
            return self._sessions[name]

    def fork(self) -> "StepGraphStepper":
        """Another stepper over the same sessions (the runtimes' sessions run from several threads) with its own
        batch state, for a worker thread."""
        other = copy.copy(self)  # shares the session, output-name and detail dicts and the lock
        other._ids, other.past = None, None
        return other

    def start(self, input_ids: Any, attention_mask: Any, n: int) -> None:
        """Encode the prompts (``(b, L)`` tensors or arrays) once; every prompt gets ``n`` rows."""
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids, dtype=np.int64)
        mask = np.asarray(attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask,
                          dtype=np.int64)
        self._ids = ids
        enc = self._sessions[self._encoder_file]
        self.cross = dict(zip(self._outputs[self._encoder_file], enc.run(None, {"input_ids": ids, "attention_mask": mask})))
        b, length = ids.shape
        # prompt e's rows see only its real tokens; float32 min as transformers masks
        self.cross_bias = np.where(mask == 1, 0.0, FLOOR).astype(np.float32).reshape(b, 1, 1, length)
        self.row_prompt = np.repeat(np.arange(b), n)
        self._grid()
        _, heads, _, d_kv = self.cross[next(iter(self.cross))].shape
        self.past: dict[str, np.ndarray] | None = {
            c: np.zeros((b * n, heads, CACHE_CHUNK, d_kv), dtype=np.float32) for c in self._cache_names}
        self.t = 0

    def _run(self, tokens: Any, outputs: list[str], k: int) -> list[np.ndarray]:
        if self.past is None:
            raise RuntimeError("step before start")
        capacity = next(iter(self.past.values())).shape[2]
        if self.t == capacity:  # the buffers grow by CACHE_CHUNK positions, not by one every step
            self.past = {c: np.concatenate([v, np.zeros(v.shape[:2] + (CACHE_CHUNK,) + v.shape[3:], v.dtype)], axis=2)
                         for c, v in self.past.items()}
            capacity += CACHE_CHUNK
        rel = np.arange(capacity + 1, dtype=np.int64) - self.t
        rel[-1] = 0  # the new token itself
        mask = np.zeros(capacity + 1, dtype=np.float32)
        mask[self.t:capacity] = FLOOR  # empty slots
        ids = np.asarray(tokens.numpy() if hasattr(tokens, "numpy") else tokens, dtype=np.int64)[:, None]
        outs = self._sessions[self._decoder_file].run(outputs, {
            "input_ids": ids, "self_rel": rel, "self_mask": mask, "cross_bias": self.cross_bias,
            "slot_rows": self.slot_rows, "row_slots": self.row_slots, **self.cross, **self.past,
            "top_k": np.array([k], dtype=np.int64)})
        n_new = len(self._new_names)
        for name, new in zip(self._new_names, outs[len(outputs) - n_new:]):  # new_{k,v}_i -> cache_{k,v}_i
            self.past["cache_" + name[len("new_"):]][:, :, self.t, :] = new
        self.t += 1
        return outs

    def step(self, tokens: Any) -> Any:
        """Feed one token per live row; the logits over the whole vocabulary ``(rows, vocab)`` (float32 tensor)."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(self._run(tokens, self._logits_out, 1)[0], dtype=np.float32))

    def step_topk(self, tokens: Any, k: int) -> tuple[Any, Any]:
        """Feed one token per live row; the ``k`` largest logits per row (descending) and their token ids."""
        import torch

        outs = self._run(tokens, self._topk_out, k)
        return torch.from_numpy(outs[0]), torch.from_numpy(outs[1])

    def _grid(self) -> None:
        """The (prompts, slots) grid of the step decoder's cross-attention: rows are grouped by prompt in
        ascending order, ``slots`` = the most live rows of one prompt; a prompt's spare slots repeat its first
        row (their results are not read back)."""
        counts = np.bincount(self.row_prompt, minlength=self.cross_bias.shape[0])
        slots = int(counts.max()) if len(counts) else 0
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        within = np.arange(len(self.row_prompt)) - first[self.row_prompt]
        self.row_slots = (self.row_prompt * slots + within).astype(np.int64)
        j = np.arange(slots)[None, :]
        grid = first[:, None] + np.where(j < counts[:, None], j, 0)
        self.slot_rows = grid.reshape(-1).astype(np.int64)

    def keep(self, positions: Any) -> None:
        """Keep these rows (positions in the current batch, in this order; a position may repeat, as beam search's
        parents do), grouped by prompt in ascending prompt order."""
        import torch

        pos = positions if isinstance(positions, torch.Tensor) else torch.as_tensor(np.asarray(positions))
        pos = pos.to(torch.long)
        order = self.row_prompt[pos.numpy()]
        if len(order) > 1 and (np.diff(order) < 0).any():
            raise ValueError("rows must stay grouped by prompt in ascending order")

        def rows(a: np.ndarray) -> np.ndarray:  # torch's index_select copies rows faster than numpy indexing
            return torch.from_numpy(a).index_select(0, pos).numpy()

        self.row_prompt = order
        live = np.unique(self.row_prompt)
        if len(live) < self.cross_bias.shape[0]:  # prompts without live rows leave the cross-attention
            self.cross = {c: np.ascontiguousarray(v[live]) for c, v in self.cross.items()}
            self.cross_bias = np.ascontiguousarray(self.cross_bias[live])
            self.row_prompt = np.searchsorted(live, self.row_prompt)
        self._grid()
        if self.past:
            self.past = {c: rows(v) for c, v in self.past.items()}
