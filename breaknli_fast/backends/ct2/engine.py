"""The CTranslate2 engine (``ct2``): the generator role on CTranslate2's T5, the classifier role on another engine.

CTranslate2 (``pip install 'breaknli-fast[ct2]'``) is an inference runtime for Transformer models with its own
int8 kernels and decoding loop: a second runtime for the generator, and the yardstick of the generator's speed
(BENCHMARKS.md: at flan-t5-small / -base shapes on the CPU the ort engine's int8 step graphs outrun it). This
backend uses it for the generator:

* **generator**: a local T5-family model (Flan-T5) converted once with CTranslate2's own converter
  (``ctranslate2.converters.TransformersConverter``, float32 weights) into the export cache, checked there
  against the torch fp32 reference (:mod:`breaknli_fast.backends.ct2.exporter`, reached through
  :func:`breaknli_fast.export.api.export_model` with ``format="ct2"``), and loaded with the compute type of the precision
  (``fp32`` = float32, ``int8`` = int8 weights quantized at load time; on CUDA also ``fp16`` / ``bf16``);
* **classifier** (and masked LMs): not here. The backend's declaration hands them to ``auto``'s choice (ort where
  ONNX Runtime is installed, else torch) where ``ct2`` is named for every role; ``--classifier-engine`` (bench:
  ``gen=ct2:int8/clf=torch:fp32``) picks another. The classifier's :class:`EngineInfo` names the engine that ran it.

Decoding maps onto CTranslate2's options: sampling = ``beam_size 1``, ``num_hypotheses K``,
``sampling_topk`` / ``sampling_topp`` / ``sampling_temperature`` (top-k 0 = the whole vocabulary, as in
transformers); greedy = ``sampling_topk 1``; beam = ``beam_size`` / ``num_hypotheses``;
``min_new_tokens`` / ``max_new_tokens`` = ``min_decoding_length`` / ``max_decoding_length``. Diverse beam and
the ``transformers`` sampler (token identity with transformers' generate) are refused in one line.

**Seeds.** CTranslate2 keeps one random generator per worker thread, seeded once, at its first draw, from the
process-wide seed (``ctranslate2.set_random_seed``); a later seed does not reach it, and requests carry no seed
of their own. So this engine cannot give each prompt its own random stream as the torch and ort engines do:
it seeds its worker from the first prompt's seed (``derive_seed("ct2", seed)``) before its first draw, and its
candidates are reproducible for the same calls in the same order on a freshly loaded engine, not per prompt
(a resumed run, or another batching, samples other, equally valid candidates). Its samples are not
token-identical to torch's either (another sampler, other kernels); its parity is judged statistically, by the
bench's equivalence verdicts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from breaknli_fast.export.api import export_model
from breaknli_fast.engines.base import (GENERATOR, Decoding, EngineInfo, GeneratorBase, GeneratorStats,
                                        derive_seed)
from breaknli_fast.engines.options import option
from breaknli_fast.engines.generation import GenerationOptions, default_gen_batch, generation_config_for
from breaknli_fast.engines.model_info import (ModelLoadError, effective_max_length, load_config, model_kind,
                                              resolve_model)
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.errors import UserError

INSTALL_CT2 = "pip install 'breaknli-fast[ct2]' (ctranslate2)"
# precision -> CTranslate2 compute type
COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "fp16": "float16", "bf16": "bfloat16"}
CT2_FAMILIES = ("t5",)  # converted and checked (breaknli_fast.backends.ct2.exporter); mT5 / umT5 convert too but are untested
# the conversion check: greedy decoding of these many prompts, and the log-probabilities CTranslate2 gives
# torch's greedy tokens against torch's own (fp32 against fp32: rounding only)
CHECK_PROMPTS = 4
CHECK_NEW_TOKENS = 16
CHECK_MAX_ABS_LOGPROB = 1e-3


def import_ct2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise EngineUnavailable(f"the ct2 engine needs CTranslate2: {INSTALL_CT2}") from None
    return ctranslate2


@dataclass
class Ct2Options(GenerationOptions):
    """The options of the ct2 engine's loaders: the common ones, the generator's, and these."""

    engine = "ct2"

    cache_dir: str | None = option(None, roles=(GENERATOR,))  # where conversions are kept (default: the export cache)
    force: bool = option(False, roles=(GENERATOR,))  # convert again even when a cached conversion matches


OPTIONS = Ct2Options  # the registry reads a backend's options class here


def vocabulary(folder: Path) -> dict[str, int]:
    """CTranslate2's target vocabulary (token -> id: the model's ids, as the converter wrote them)."""
    for name in ("shared_vocabulary.json", "target_vocabulary.json"):
        p = Path(folder) / name
        if p.is_file():
            return {t: i for i, t in enumerate(json.loads(p.read_text()))}
    raise ModelLoadError(f"{folder}: no CTranslate2 vocabulary file")


# -- the generator ---------------------------------------------------------------------------------------------

class Ct2Generator(GeneratorBase):
    """A :class:`~breaknli_fast.engines.base.Generator` over CTranslate2's ``Translator`` (one worker, its
    intra-op threads = ``threads``, default the physical cores). ``prompt_batch`` prompts per
    ``translate_batch`` call, ``K`` hypotheses each."""

    stats: GeneratorStats

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: Ct2Options | None = None):
        from transformers import AutoTokenizer

        from breaknli_fast.engines.cpu_features import physical_cores

        o = opts or Ct2Options()
        ct2 = import_ct2()
        dev, index = (device.split(":") + ["0"])[:2]
        if dev not in ("cpu", "cuda"):
            raise ModelLoadError(f"unknown device {device!r}; use cpu or cuda[:N]")
        if dev == "cuda" and ct2.get_cuda_device_count() == 0:
            raise EngineUnavailable("--device cuda: CTranslate2 sees no CUDA GPU")
        compute = COMPUTE_TYPES.get(precision)
        supported = ct2.get_supported_compute_types(dev)
        if compute is None or compute not in supported:
            names = [p for p, c in COMPUTE_TYPES.items() if c in supported]
            raise ModelLoadError(f"the ct2 engine runs {', '.join(names)} on {dev}, not {precision!r}")
        config = load_config(model)
        if model_kind(config) != "seq2seq" or getattr(config, "model_type", None) not in CT2_FAMILIES:
            raise ModelLoadError(f"{model!r}: the ct2 engine generates with T5 text-to-text models (Flan-T5), not "
                                 f"{getattr(config, 'model_type', '?')!r}")
        exported = export_model(model, format="ct2", precision="fp32", device="cpu", cache_dir=o.cache_dir,
                                force=o.force, progress=False)
        self.folder, manifest, reused = exported.path, exported.manifest, exported.reused
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
        self.config = config
        generation_config_for(resolve_model(model), model, "ct2", "--engine torch or ort")
        self.max_input_length, limits = effective_max_length(o.max_input_length, self.config, self.tokenizer,
                                                             key="max_input_length")
        self.prompt_batch = max(1, int(o.prompt_batch or default_gen_batch(dev)))  # --gen-batch, else the device default
        self.threads = int(o.threads) if o.threads else (physical_cores() if dev == "cpu" else 0)
        self.translator = ct2.Translator(str(self.folder), device=dev, device_index=int(index), compute_type=compute,
                                         inter_threads=1, intra_threads=self.threads)
        self.vocab = vocabulary(self.folder)
        self.eos_id = int(self.config.eos_token_id)
        self._seeded = False
        self._ct2 = ct2
        self.stats = GeneratorStats()
        v = manifest.get("validation") or {}
        self.info = EngineInfo("ct2", GENERATOR, model, precision, device, {
            "runtime": f"ctranslate2 {ct2.__version__}", "compute_type": compute, "export_dir": str(self.folder),
            "export_reused": reused, "intra_threads": self.threads, "inter_threads": 1,
            "prompt_batch": self.prompt_batch, "validation": {k: v.get(k) for k in
                                                              ("token_agreement", "max_abs_logprob", "passed")},
            "seeding": "one random stream per engine, seeded from the first prompt's seed: reproducible for the "
                       "same calls in the same order, not per prompt (CTranslate2 seeds a worker's generator once)",
            **limits})

    def _options(self, n: int, decoding: Decoding) -> dict[str, Any]:
        kw: dict[str, Any] = {"max_decoding_length": decoding.max_new_tokens,
                              "min_decoding_length": decoding.min_new_tokens, "return_end_token": True,
                              "max_input_length": 0}  # prompts are cut by the tokenizer (max_input_length)
        if decoding.strategy == "sampling":
            if decoding.sampler != "fast":
                raise UserError("the ct2 engine samples with CTranslate2's own sampler; --sampler transformers "
                                "(token-identical to transformers' generate) needs --engine torch or ort")
            kw.update(beam_size=1, num_hypotheses=n, sampling_topk=int(decoding.top_k),
                      sampling_topp=float(decoding.top_p), sampling_temperature=float(decoding.temperature))
        elif decoding.strategy == "greedy":
            if n != 1:
                raise ValueError("greedy decoding yields one sequence per input; use n=1")
            kw.update(beam_size=1, sampling_topk=1)
        elif decoding.strategy == "beam":
            kw.update(beam_size=max(decoding.num_beams or n, n), num_hypotheses=n)
        else:
            raise UserError(f"the ct2 engine has no {decoding.strategy} decoding; use --engine torch or ort")
        return kw

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> list[list[list[int]]]:
        """``n`` rows of generated ids per prompt (up to and including the end token, as the other engines)."""
        if len(seeds) != len(prompts):
            raise ValueError("one seed per prompt is required")
        kw = self._options(n, decoding)
        if decoding.strategy == "sampling" and not self._seeded and prompts:
            # the worker's generator is made at its first draw, from the process-wide seed at that moment
            self._ct2.set_random_seed(derive_seed("ct2", int(seeds[0])))
            self._seeded = True
        out: list[list[list[int]]] = []
        for i in range(0, len(prompts), self.prompt_batch):
            part = list(prompts[i:i + self.prompt_batch])
            ids = self.tokenizer(part, truncation=True, max_length=self.max_input_length)["input_ids"]
            sources = [self.tokenizer.convert_ids_to_tokens(row) for row in ids]
            t0 = time.perf_counter()
            results = self.translator.translate_batch(sources, **kw)
            dt = time.perf_counter() - t0
            rows = [[[self.vocab[t] for t in hyp] for hyp in r.hypotheses[:n]] for r in results]
            self.stats.work.computed = False  # CTranslate2's own batches: their padding is not known here
            self.stats.work.add_outputs([len(x) for x in ids], rows)
            for r in rows:
                self.stats.new_tokens += sum(len(h) for h in r)
                self.stats.sequences += len(r)
            self.stats.prompts += len(part)
            self.stats.seconds += dt
            self.stats.call_seconds.append(dt)
            out.extend(rows)
        return out

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        return self.decode_ids(self.generate_ids(prompts, n, decoding, seeds))

    def decode_ids(self, ids: list[list[list[int]]]) -> list[list[str]]:
        return [[t.strip() for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)] for rows in ids]

    def count_tokens(self, texts: Iterable[str]) -> int:
        return sum(len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"])


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> Ct2Generator:
    """A T5-family generator on CTranslate2 (converted on first use and cached); ``opts``: :class:`Ct2Options` of
    the generator role."""
    return Ct2Generator(model, precision, device, Ct2Options.build(GENERATOR, opts))
