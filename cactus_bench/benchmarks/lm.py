"""Our decode engine as an lm-eval model: `generate_until` decodes each request with the run's method and
sampling, cuts at the request's stop strings and removes Qwen3's `<think>…</think>` before scoring. Decode
statistics are kept per request.

From lm-eval's own evaluator (`model="cactus"`, registered on import), `model_args` name the pair and the
method: `drafter=...,verifier=...,method=cactus,delta=0.75,m=10,temperature=0.6,top_p=0.95,top_k=20`;
`python -m cactus_bench.lm_eval_cli` is lm-eval's CLI with this model registered."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ..decode import GenerationOutput
from ..methods import BASELINE, Method
from ..models import Pair, load_pair
from .filters import remove_thinking


def cut_at_stop(text: str, until: list[str]) -> tuple[str, bool]:
    """lm-eval's convention: the text before the first stop string."""
    cut = min((text.find(s) for s in until if s and s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def stable_seed(*parts) -> int:
    """A seed from the run seed and a sample key, stable across processes (Python's hash is salted)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") & (2**63 - 1)


@dataclass
class Generation:
    text: str  # the reply lm-eval scores: cut at the first stop string (thinking kept: a filter removes it)
    raw_text: str  # everything the model emitted
    output: GenerationOutput
    paired: dict | None = None  # paired timing: the verifier alone's decode time of the same request

    def stats(self) -> dict:
        """The decode's statistics (`GenerationOutput.summary`), with the paired times where there are any."""
        return self.output.summary() | (self.paired or {})


class CactusLM(LM):
    """lm-eval model over a loaded pair. `sampling` holds temperature/top_k/top_p (the task's own
    greedy settings are ignored: the paper samples); `max_gen_toks` caps every request.

    With `paired_timing`, every request is also decoded by the verifier alone, back to back with the
    method's decode and alternating which goes first, from the same seed the verifier-alone run uses (so
    it is that run's decode of the request, timed again beside the method's)."""

    def __init__(
        self,
        pair: Pair,
        method: Method,
        sampling: dict,
        max_gen_toks: int,
        seed: int = 0,
        filter_thinking: bool = True,
        engine: dict | None = None,
        add_bos_token: bool = False,
        paired_timing: bool = False,
    ):
        super().__init__()
        self.pair, self.method, self.sampling = pair, method, dict(sampling)
        self.engine = dict(engine or {})  # static_cache / compile for the decode loops
        self.max_gen_toks, self.seed = max_gen_toks, seed
        # lm-eval's stock tasks lack the authors' thinking filter: `generate_until` applies it for them
        self.filter_thinking = filter_thinking
        self.add_bos_token = add_bos_token  # lm-eval adds a BOS for Gemma models (see conf/pair/gemma2_*)
        self.records: list[dict] = []  # per request: decode statistics, for lm-eval-driven runs
        self.paired = Method(BASELINE) if paired_timing and method.uses_drafter else None
        self._pairs = 0  # paired requests so far: even ones time the verifier alone first

    SAMPLING_ARGS = ("temperature", "top_k", "top_p")
    PAIR_ARGS = ("drafter", "verifier", "dtype", "device", "revision")

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> CactusLM:
        """lm-eval's constructor: `drafter=...,verifier=...,method=cactus,delta=0.75,m=10,...` (the paper's
        sampling unless temperature/top_k/top_p are given; any other key is a rule parameter)."""
        from lm_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(arg_string)
        missing = [k for k in ("drafter", "verifier") if k not in args]
        if missing:
            raise ValueError(f"cactus model_args need {' and '.join(missing)} (hub ids or local folders)")
        pair_kw = {k: args.pop(k) for k in cls.PAIR_ARGS if k in args}
        sampling = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
        sampling.update({k: args.pop(k) for k in cls.SAMPLING_ARGS if k in args})
        name, m = args.pop("method", "cactus"), int(args.pop("m", 10))
        max_gen_toks, seed = int(args.pop("max_gen_toks", 4096)), int(args.pop("seed", 0))
        add_bos = bool(args.pop("add_bos_token", "gemma" in str(pair_kw["verifier"]).lower()))  # as lm-eval does
        method = Method(str(name), args, m)  # what is left: the rule's parameters
        pair = load_pair(pair_kw.pop("drafter"), pair_kw.pop("verifier"), **pair_kw)
        return cls(pair, method, sampling, max_gen_toks, seed=seed, add_bos_token=add_bos)

    # --- chat template (lm-eval builds prompts with it) ---
    @property
    def tokenizer_name(self) -> str:
        return self.pair.verifier_id.replace("/", "__")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.pair.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    # --- generation ---
    def generate(self, context: str, until: list[str], key) -> Generation:
        tok = self.pair.tokenizer
        ids = tok(context, add_special_tokens=self.add_bos_token)["input_ids"]
        device = self.pair.verifier.get_input_embeddings().weight.device
        stops = [s for s in until if s]
        window = max((len(s) for s in stops), default=0) + 16

        def stop(tokens: list[int]) -> bool:  # only the tail can newly contain a stop string
            return any(s in tok.decode(tokens[-window:]) for s in stops)

        def decode(method: Method) -> GenerationOutput:
            return method.generate(
                self.pair.drafter,
                self.pair.verifier,
                ids,
                max_new_tokens=self.max_gen_toks,
                generator=torch.Generator(device=device).manual_seed(stable_seed(self.seed, key)),
                eos_token_id=self.pair.eos_token_id,
                stop=stop if stops else None,
                **self.sampling,
                **self.engine,
            )

        paired = None
        if self.paired is None:
            out = decode(self.method)
        else:
            baseline_first = self._pairs % 2 == 0
            self._pairs += 1
            if baseline_first:
                base, out = decode(self.paired), decode(self.method)
            else:
                out, base = decode(self.method), decode(self.paired)
            paired = {
                "paired_baseline_time": base.wall_time,
                "paired_method_time": out.wall_time,
                "paired_baseline_first": baseline_first,
                "paired_baseline_tokens": len(base.tokens),
            }
        raw = tok.decode(out.tokens, skip_special_tokens=True)
        text, _ = cut_at_stop(raw, stops)
        return Generation(text, raw, out, paired)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        texts = []
        for req in requests:
            context, gen_kwargs = req.args
            gen = self.generate(context, list(gen_kwargs.get("until", [])), (req.task_name, req.doc_id))
            self.records.append({"task": req.task_name, "doc_id": req.doc_id, **gen.stats()})
            texts.append(remove_thinking(gen.text) if self.filter_thinking else gen.text)
        return texts

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("cactus-bench evaluates generation tasks only (generate_until)")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("cactus-bench evaluates generation tasks only (generate_until)")


register_model("cactus")(CactusLM)
