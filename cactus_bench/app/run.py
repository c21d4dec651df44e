"""One run end to end: validate, load the pair, decode the benchmark sample by sample into the store
(resuming what is there), score each sample with lm-eval's task code, and summarise."""

from __future__ import annotations

import logging
import time

from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from .. import metrics
from ..benchmarks import specbench
from ..benchmarks.data import load_specbench
from ..benchmarks.lm import CactusLM
from ..benchmarks.scoring import TaskScorer
from ..embedded import ensure_pair
from ..models import Pair, load_pair
from .config import method_tag, run_key, validate
from .store import RunStore
from .tracking import make_tracker

log = logging.getLogger("cactus_bench")
EMBEDDED = "embedded:tiny/"
_PAIRS: dict[tuple, Pair] = {}  # a sweep in one process loads each pair once


def resolve_model(name: str) -> str:
    """`embedded:tiny/<role>` -> the cached embedded pair's folder (built on first use)."""
    if name.startswith(EMBEDDED):
        return str(ensure_pair(log=log.info) / name[len(EMBEDDED):])
    return name


def get_pair(cfg: DictConfig) -> Pair:
    p = cfg.pair
    key = (p.drafter, p.verifier, p.dtype, p.device, str(p.verifier_device_map), p.revision)
    if key not in _PAIRS:
        _PAIRS.clear()  # one pair in memory at a time
        device_map = OmegaConf.to_container(p.verifier_device_map) if isinstance(p.verifier_device_map, DictConfig) \
            else p.verifier_device_map
        _PAIRS[key] = load_pair(resolve_model(p.drafter), resolve_model(p.verifier), dtype=p.dtype, device=p.device,
                                verifier_device_map=device_map, revision=p.revision)
    return _PAIRS[key]


def data_label(cfg: DictConfig) -> str:
    return "gpqa_" + (cfg.data.subset or "diamond") if cfg.data.name == "gpqa" else cfg.data.name


def run(cfg: DictConfig) -> dict:
    """Run (or resume) the configured run; returns its summary."""
    method = validate(cfg)  # before anything expensive
    scorer = None
    if cfg.data.name == "specbench":
        questions = load_specbench(cfg.data.root)
    else:
        scorer = TaskScorer(data_label(cfg), cfg.data.root)  # data errors surface before models load
    pair = get_pair(cfg)
    lm = CactusLM(pair, method, OmegaConf.to_container(cfg.sampling), cfg.max_gen_toks, seed=cfg.seed,
                  engine=OmegaConf.to_container(cfg.engine))
    store = RunStore.open(cfg)
    done = {s["index"]: s for s in store.samples()}
    tracker = make_tracker(cfg, store.folder)
    try:
        if scorer is not None:
            scorer.chat_template, scorer.tokenizer_name = lm.apply_chat_template, lm.tokenizer_name
            items = scorer.prompts(cfg.limit)
            todo = [p for p in items if p.index not in done]
            work = lambda p: _task_sample(lm, scorer, p)  # noqa: E731
        else:
            items = questions[: cfg.limit] if cfg.limit else questions
            todo = [q for q in items if q["question_id"] not in done]
            if todo:
                specbench.warm_up(lm, questions[0], cfg.data.warmup)
            work = lambda q: _specbench_sample(lm, q, cfg)  # noqa: E731
        log.info("run %s: %d items, %d already done, %d to go -> %s", run_key(cfg), len(items),
                 len(items) - len(todo), len(todo), store.folder)
        finished = [done[k] for k in sorted(done)]
        bar = tqdm(todo, desc=f"{cfg.method.name} {cfg.data.name}", disable=not cfg.progress, dynamic_ncols=True)
        for item in bar:
            record = work(item)
            store.append(record)
            finished.append(record)
            tracker.log_sample(len(finished), record)
            live = metrics.decode_metrics(finished)
            bar.set_postfix(AL=f"{live['accepted_length'] or 0:.2f}", tok_s=f"{live['tokens_per_s'] or 0:.1f}")
        wanted = {(p.index if scorer else p["question_id"]) for p in items}
        summary = summarise(cfg, [s for s in finished if s["index"] in wanted], scorer)
        store.write_summary(summary)
        if scorer is None:
            store.write_specbench_answers([s["answer"] for s in finished if s["index"] in wanted])
        store.finish("complete")
        if cfg.tracking.backend != "none":
            tracker.log_figures(accepted_length_figure(finished, store.folder))
        tracker.finish(summary, finished)
        return summary
    except BaseException:
        store.finish("interrupted")
        tracker.finish(None, [])
        raise


def _task_sample(lm: CactusLM, scorer: TaskScorer, prompt) -> dict:
    gen = lm.generate(prompt.context, prompt.until, (scorer.name, prompt.index))
    return {"index": prompt.index, "id": prompt.id, "response": gen.text, "raw_response": gen.raw_text,
            "tokens": gen.output.tokens, "stats": gen.output.summary(), "rounds_accepted": gen.output.rounds.accepted,
            "scores": scorer.score(prompt.index, gen.text), "finished_at": time.time()}


def _specbench_sample(lm: CactusLM, question: dict, cfg: DictConfig) -> dict:
    answer, turns = specbench.answer_question(lm, question, f"{cfg.pair.name}-{method_tag(cfg)}")
    return {"index": question["question_id"], "id": question["question_id"], "category": question["category"],
            "stats": metrics.add_stats(turns), "answer": answer, "finished_at": time.time()}


def summarise(cfg: DictConfig, samples: list[dict], scorer: TaskScorer | None) -> dict:
    out = {"run_key": run_key(cfg), "pair": cfg.pair.name, "method": cfg.method.name,
           "params": OmegaConf.to_container(cfg.method.params, resolve=True), "data": cfg.data.name,
           "m": cfg.m, "seed": cfg.seed, "experiment": cfg.experiment_name, **metrics.decode_metrics(samples)}
    if scorer is not None and samples:
        scores = scorer.aggregate([s["scores"] for s in samples])
        out["scores"] = scores
        out["score"] = 100 * scores[scorer.primary_metric]
        out["score_stderr"] = 100 * scores[scorer.primary_metric.replace(",", "_stderr,", 1)]
        out["score_metric"] = scorer.primary_metric
    if scorer is None and samples:
        out["specbench"] = specbench.speed_metrics([s["answer"] for s in samples], None)
    return out


def accepted_length_figure(samples: list[dict], folder) -> dict:
    """This run's distribution of accepted drafts per verifier call (a per-run figure for dashboards)."""
    counts = [a for s in samples for a in s.get("rounds_accepted", [])]
    if not counts:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.hist(counts, bins=range(max(counts) + 2), align="left", rwidth=0.85)
    ax.set(xlabel="accepted drafts per verifier call", ylabel="verifier calls",
           title=f"AL = {sum(counts) / len(counts):.2f}")
    path = folder / "accepted_length.png"
    fig.savefig(path, bbox_inches="tight", dpi=110)
    plt.close(fig)
    return {"accepted_length": path}
