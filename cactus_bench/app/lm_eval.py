"""Our decoder as an lm-eval model: `generate_until` hands lm-eval's requests to a `Decoder` and removes
Qwen3's `<think>…</think>` before lm-eval scores. Decode statistics are kept per request.

From lm-eval's own evaluator (`model="cactus"`, registered on import), `model_args` name the pair and the
method: `drafter=...,verifier=...,method=cactus,delta=0.75,m=10,temperature=0.6,top_p=0.95,top_k=20`;
`python -m cactus_bench.lm_eval_cli` is lm-eval's CLI with this model registered."""

from __future__ import annotations

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ..decode import Decoder, DecoderSettings, Request, build_decoder
from ..methods import Method
from ..models import Pair, load_pair
from .filters import remove_thinking


class CactusLM(LM):
    """lm-eval model over a decoder. The decoder's sampling holds (the task's own greedy settings are
    ignored: the paper samples), and its token budget caps every request."""

    def __init__(self, pair: Pair, decoder: Decoder, filter_thinking: bool = True):
        super().__init__()
        self.pair, self.decoder = pair, decoder
        # lm-eval's stock tasks lack the authors' thinking filter: `generate_until` applies it for them
        self.filter_thinking = filter_thinking
        self.records: list[dict] = []  # per request: decode statistics

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
        settings = DecoderSettings(max_gen_toks, **sampling, seed=seed, add_bos_token=add_bos)
        return cls(pair, build_decoder(pair, method, settings))

    # --- chat template (lm-eval builds prompts with it) ---
    @property
    def tokenizer_name(self) -> str:
        return self.pair.tokenizer_name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.pair.apply_chat_template(chat_history, add_generation_prompt)

    # --- generation ---
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        batch = [
            Request(req.args[0], (req.task_name, req.doc_id), tuple(req.args[1].get("until", []))) for req in requests
        ]
        texts = {}  # by request object: a batched decoder may finish them in any order
        for gen in self.decoder.generate(batch):
            task, doc_id = gen.request.key
            self.records.append({"task": task, "doc_id": doc_id, **gen.stats()})
            texts[id(gen.request)] = remove_thinking(gen.text) if self.filter_thinking else gen.text
        return [texts[id(r)] for r in batch]

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("cactus-bench evaluates generation tasks only (generate_until)")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("cactus-bench evaluates generation tasks only (generate_until)")


register_model("cactus")(CactusLM)
