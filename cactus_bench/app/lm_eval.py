"""Our decoders as an lm-eval model (`model="cactus"`, registered on import): `generate_until` hands lm-eval's
requests to a `Decoder` and removes Qwen3's `<think>…</think>` before lm-eval scores. Decode statistics are
kept per request.

`model_args` are run settings, composed by Hydra exactly as `python -m cactus_bench` composes them (so the
defaults are conf/'s: the pair's token budget, the paper's sampling):
`pair=tiny,method=cactus,delta=0.75,m=10` or `drafter=<id or folder>,verifier=<id or folder>,...`; sampling
keys (`temperature`, `top_k`, `top_p`) and pair keys (`dtype`, `device`, `revision`, `add_bos_token`) are
accepted bare, any other unknown key is a rule parameter. `python -m cactus_bench.app.lm_eval_cli` is lm-eval's
CLI with this model registered and the project's tasks on its path.
"""

from __future__ import annotations

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from cactus_bench.adapters.benchmarks.filters import remove_thinking
from cactus_bench.core.decode import Decoder, Request

PAIR_KEYS = ("drafter", "verifier", "dtype", "drafter_dtype", "verifier_dtype", "device", "revision", "add_bos_token")
SAMPLING_KEYS = ("temperature", "top_k", "top_p")
RUN_KEYS = ("delta", "m", "max_gen_toks", "seed", "batch_size", "threads")
GROUPS = ("pair", "method", "sampling", "engine")  # config groups chosen by name, e.g. pair=tiny


def overrides_of(model_args: dict) -> list[str]:
    """lm-eval's model_args as the run's Hydra overrides; a key that is none of the run's is a rule parameter."""

    def value(v) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    out = []
    for key, v in model_args.items():
        if key in GROUPS:
            out.append(f"{key}={value(v)}")
        elif key in PAIR_KEYS:
            out.append(f"pair.{key}={value(v)}")
        elif key in SAMPLING_KEYS:
            out.append(f"sampling.{key}={value(v)}")
        elif key in RUN_KEYS:
            out.append(f"{key}={value(v)}")
        else:
            out.append(f"++method.params.{key}={value(v)}")
    return sorted(out, key=lambda o: o.split("=")[0] not in GROUPS)  # groups first, then their keys


class CactusLM(LM):
    """lm-eval model over a decoder. The decoder's sampling holds (the task's own greedy settings are
    ignored: the paper samples), and its token budget caps every request."""

    def __init__(self, decoder: Decoder | None = None, filter_thinking: bool = True, **model_args):
        super().__init__()
        if decoder is None:
            decoder = decoder_of(model_args)
        elif model_args:
            raise TypeError(f"CactusLM takes a decoder or model_args, not both (got {sorted(model_args)})")
        self.decoder = decoder
        # lm-eval's stock tasks lack the authors' thinking filter: `generate_until` applies it for them
        self.filter_thinking = filter_thinking
        self.records: list[dict] = []  # per request: decode statistics

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> CactusLM:
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> CactusLM:
        """lm-eval's constructors (its CLI calls this one): `model_args` win over lm-eval's own options."""
        return cls(**(lm_eval_options(additional_config or {}) | dict(arg_dict)))

    # --- chat template (lm-eval builds prompts with it) ---
    @property
    def tokenizer_name(self) -> str:
        return self.decoder.tokenizer_name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.decoder.apply_chat_template(chat_history, add_generation_prompt)

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


def lm_eval_options(options: dict) -> dict:
    """What lm-eval passes every model besides model_args (batch_size, max_batch_size, device), as run
    settings: a batch size other than its default 1 (its "auto" is ours), and a device other than its
    default cuda:0 on a machine without CUDA (there the pair's device, auto, holds)."""
    import torch

    out = {}
    batch = options.get("batch_size")
    if batch not in (None, 1, "1"):
        out["batch_size"] = "auto" if str(batch).startswith("auto") else batch
    device = options.get("device")
    if device is not None and not (device == "cuda:0" and not torch.cuda.is_available()):
        out["device"] = device
    return out


def decoder_of(model_args: dict) -> Decoder:
    """The decoder a run with these settings would use: composed, validated (one paragraph on a bad key,
    before any model loads) and built by the app."""
    from cactus_bench.app.compose import compose
    from cactus_bench.app.config import validate
    from cactus_bench.app.run import get_decoder

    args = {k: v for k, v in model_args.items() if v is not None}
    if "pair" not in args and "verifier" not in args:
        raise ValueError("cactus model_args need pair=<name> or verifier=<hub id or folder> (and drafter=...)")
    cfg = compose(tuple(overrides_of(args)))
    return get_decoder(validate(cfg))


def task_manager():
    """lm-eval's task manager with the project's tasks (`cactus_gsm8k`, `cactus_arith`, ...) added, and those
    of installed packages (`benchmarks.scoring.task_dirs`)."""
    from lm_eval.tasks import TaskManager

    from cactus_bench.adapters.benchmarks.scoring import task_dirs

    return TaskManager(include_path=task_dirs())


register_model("cactus")(CactusLM)
