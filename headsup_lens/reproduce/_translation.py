"""The paper's translation experiments (Table 1 rows, Fig. 2, Table 8) in stages over masks stored in
`<out>/translation/masks/` (`experiments/translation.py`: SmolLM2-135M-Instruct, hours on a CPU).

`scan_translation` generates instructed translations of a few training pairs per direction
(resumable) and `scan_summary` scores them with every metric side by side; `train_translation_masks`
keeps one final mask per direction (`translation_mask_name`); `table1_rows`, `fig2_sweeps` and
`table8_rows` evaluate a direction's stored mask (each resumable: `evaluate` from the settings an
interrupted run finished, the sweeps per order). Every file lies under `translation/` of the run's
output folder and every table is written with every digit (`float_format=None`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .._io import atomic_write, read_table
from ..analysis import influence_order, random_order, removal_sweep, weight_order
from ..data import CHAR_LEVEL_LANGUAGES, Task, encode_prompt, load_task
from ..evaluation import (
    EvalConfig,
    bleu,
    evaluate,
    first_line,
    generate_answers,
    identify_language,
    paper_bleu,
    paper_rouge_l,
    rouge_l,
    target_language_share,
)
from ..masks import HeadMask
from ..models import prompt_format
from ..plots import rank_figure
from ..training import TrainConfig, TrainResult, train_masks
from ._experiment import Experiment, timed
from ._masks import mask_on_another_task

FOLDER = "translation"
SCAN_TARGETS = ("fr", "de", "es", "zh", "ru", "ar")
ECHO = "echo baseline (source as output)"
# The paper's alpha per direction for Table 8 (its evaluation scales the heads outside the mask by these).
PAPER_TABLE8_ALPHA = {"en-de": 0.3, "en-fr": 0.2, "en-zh": 0.1, "zh-en": 0.3, "fr-en": 0.2, "de-en": 0.4}


def _table(xp: Experiment, frame: pd.DataFrame, stem: str) -> None:
    xp.table(frame, f"{FOLDER}/{stem}", float_format=None)


def translation_mask_name(pair: str) -> str:
    """`translation/masks/translation_<pair>.safetensors`: a direction's stored mask, relative to the output folder."""
    return f"{FOLDER}/masks/translation_{pair}.safetensors"


def _stored_mask(xp: Experiment, pair: str) -> HeadMask | None:
    path = xp.current(translation_mask_name(pair))
    return HeadMask.load(path, xp.model) if path.exists() else None


def setting_names(alpha: float) -> dict[str, str]:
    """The translation tables' row names for `evaluate`'s settings (the scaled row carries its alpha)."""
    return {"instructed + scaled mask": f"instructed + scaled mask (alpha {alpha:g})", "echo baseline": ECHO}


# ---------------------------------------------------------------------------------------------- scan
def scan_translation(
    xp: Experiment, pairs: Sequence[str], *, n: int, batch_size: int, data_dir: str | None = None
) -> pd.DataFrame:
    """Instructed greedy translations of the first `n` training pairs of each direction (`src-tgt`),
    appended per direction to `translation/scan_generations.csv` at once (a rerun skips the directions
    it holds); then `scan_summary` of them as `translation/scan.csv`. Returns the summary."""
    path = xp.out / FOLDER / "scan_generations.csv"
    for pair in pairs:
        done = pd.read_csv(path, keep_default_na=False) if path.exists() else pd.DataFrame(columns=["pair"])
        if (done.pair == pair).any():
            continue
        task = load_task(f"translation/{pair}", data_dir)
        sample = task.train_pairs[:n]
        template = prompt_format(xp.model)
        prompts = [encode_prompt(xp.model, task.user_text(x, instructed=True), template=template) for x, _ in sample]
        with timed(xp.out / FOLDER, "scan", f"{pair}: {len(sample)} instructed generations"):
            texts = generate_answers(xp.model, prompts, max_new_tokens=task.max_new_tokens, batch_size=batch_size)
        rows = pd.DataFrame(
            {"pair": pair, "source": [x for x, _ in sample], "reference": [y for _, y in sample], "generation": texts}
        )
        table = pd.concat([done, rows], ignore_index=True) if len(done) else rows
        atomic_write(path, lambda tmp, table=table: table.to_csv(tmp, index=False))
    summary = scan_summary(pd.read_csv(path, keep_default_na=False), xp.model.tokenizer)
    _table(xp, summary, "scan")
    return summary


def scan_summary(generations: pd.DataFrame, tokenizer=None) -> pd.DataFrame:
    """Per direction of a scan (`pair`, `reference`, `generation` columns): target-language share
    (first line and whole generation), the paper's ROUGE-L with the default tokenizer and (given a
    `tokenizer`) with the model's own subword tokenizer, the first-line ROUGE-L of earlier versions,
    Table 8's BLEU and first-line sacreBLEU, and as a floor each generation scored against the next
    pair's reference (a wrong sentence in the right language); the highest target-language share first."""
    table = []
    for pair, group in generations.groupby("pair", sort=False):
        tgt = str(pair).split("-")[1]
        texts, refs = list(group.generation), list(group.reference)
        lines = [first_line(t) for t in texts]
        record = {
            "pair": pair,
            "n": len(group),
            "target_language_share": target_language_share(texts, tgt),
            "target_language_share_whole": target_language_share(texts, tgt, part="whole"),
            "rouge_l": paper_rouge_l(texts, refs),
        }
        if tokenizer is not None:
            record["rouge_l_model_tokenizer"] = paper_rouge_l(texts, refs, tokenizer=tokenizer)
        record.update(
            rouge_l_first_line=rouge_l(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES),
            bleu=paper_bleu(texts, refs),
            sacrebleu_first_line=bleu(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES),
        )
        # Character n-grams give Latin-script text a high floor.
        shifted = refs[1:] + refs[:1]
        record.update(
            rouge_l_shifted_references=paper_rouge_l(texts, shifted), bleu_shifted_references=paper_bleu(texts, shifted)
        )
        table.append(record)
    return pd.DataFrame(table).sort_values("target_language_share", ascending=False)


# ---------------------------------------------------------------------------------------------- train
def train_translation_masks(
    xp: Experiment, pairs: Sequence[str], config: TrainConfig, runs: str | Path, *, data_dir: str | None = None
) -> dict[str, TrainResult]:
    """One mask per direction, trained together without instruction (`train_masks`, resumable from
    `<runs>/seed<k>-<steps>x<batch>-<pairs>`); the final masks and histories go to `translation/masks/`."""
    tasks = [load_task(f"translation/{pair}", data_dir) for pair in pairs]
    run_dir = Path(runs) / f"seed{config.seed}-{config.steps}x{config.batch_size}-{'+'.join(pairs)}"
    what = (
        f"seed {config.seed}, {config.steps} steps x batch {config.batch_size}: "
        f"{' '.join(pairs)} (this process's wall time; resumed runs count the last part only)"
    )
    with timed(xp.out / FOLDER, "train", what):
        results = train_masks(xp.model, tasks, config, out_dir=run_dir)
    for pair, (name, result) in zip(pairs, results.items()):
        result.mask.save(xp.staged(translation_mask_name(pair)))
        _table(xp, result.history, f"masks/translation_{pair}_history")
        print(f"{name}: {result.mask.n_kept} heads kept of {result.mask.values.numel()}", flush=True)
    return results


# ---------------------------------------------------------------------------------------------- analyze
def table1_rows(
    xp: Experiment, pair: str, *, alpha: float, batch_size: int, data_dir: str | None = None
) -> pd.DataFrame:
    """Table 1 rows for one direction on the held-out pairs (`evaluate`; the mask rows only once a mask
    is stored): answer loss (the paper's "PPL"), the paper's ROUGE-L, Table 8's BLEU, the
    target-language share, and the echo control (the English source copied as the output: shared names
    and cognates score without translating). `translation/table1_<pair>.csv`; the evaluation and every
    generation stay in `translation/table1_<pair>_evaluation/`, from which an interrupted run resumes."""
    task = load_task(f"translation/{pair}", data_dir)
    config = EvalConfig(alpha=alpha, batch_size=batch_size, random_seed=0)
    with timed(xp.out / FOLDER, "analyze", f"{pair}: Table 1 ({len(task.eval_pairs)} held-out pairs)"):
        out_dir = xp.out / FOLDER / f"table1_{pair}_evaluation"
        result = evaluate(xp.model, task, _stored_mask(xp, pair), config, out_dir=out_dir)
    table = result.table.assign(pair=pair, setting=result.table.setting.replace(setting_names(alpha)))
    table = table.rename(columns={"n_examples": "n"})
    table = pd.DataFrame(
        table[["pair", "setting", "n_kept", "n", "answer_nll", "rouge_l", "bleu", "target_language_share"]]
    )
    _table(xp, table, f"table1_{pair}")
    return table


def fig2_sweeps(
    xp: Experiment, pair: str, *, new_tokens: int, title: str, data_dir: str | None = None
) -> pd.DataFrame | None:
    """Fig. 2 on one held-out input without instruction: heads removed one by one in weight, influence
    (App. C.3.1, from this run's weight-order sweep) and random order; ranks of the reference's first
    token, the greedy generation at each step, its language (first line) and the first step that answers
    in the target language (`title` starts the figures' titles). An order whose generations are stored is skipped; the rows of the orders
    run are appended to `translation/fig2_summary_<pair>.csv` and returned (None without a stored mask)."""
    mask = _stored_mask(xp, pair)
    if mask is None:
        print(f"fig2 {pair}: no stored mask ({translation_mask_name(pair)}); run the train stage first", flush=True)
        return None
    model, task, tgt = xp.model, load_task(f"translation/{pair}", data_dir), pair.split("-")[1]
    x, answer = task.eval_pairs[0]
    summary, sweeps = [], {}
    for order_name in ("weight", "influence", "random"):
        stem = f"fig2_{order_name}_{pair}"
        if xp.current(f"{FOLDER}/{stem}_generations.csv").exists():
            continue
        if order_name == "influence" and "weight" not in sweeps:
            continue  # needs this run's weight-order sweep (rerun with the weight files removed)
        order = {
            "weight": lambda: weight_order(mask),
            "random": lambda: random_order(model, seed=0),
            "influence": lambda: influence_order(sweeps["weight"]),
        }[order_name]()
        with timed(xp.out / FOLDER, "analyze", f"{pair}: removal sweep, {order_name} order"):
            sweep = removal_sweep(model, task.user_text(x), order, target_tokens=[answer], max_new_tokens=new_tokens)
        sweeps[order_name] = sweep
        languages = [identify_language(first_line(g)) for g in sweep.generations]
        language_step = next((s for s, lang in zip(sweep.steps, languages) if lang == tgt), None)
        _table(xp, sweep.long(), f"{stem}_ranks")
        frame = pd.DataFrame({"step": sweep.steps, "generation": sweep.generations, "language": languages})
        _table(xp, frame, f"{stem}_generations")
        fig = rank_figure(sweep, title=f"{title}, {pair} without instruction: removal in {order_name} order")
        if language_step is not None:
            fig.add_vline(
                x=language_step,
                line_dash="dash",
                line_color="green",
                annotation_text=f"first {tgt} answer (step {language_step})",
            )
        xp.figure(fig, f"{FOLDER}/{stem}")
        n_removed = model.cfg.n_layers * model.cfg.n_heads - mask.n_kept
        summary.append(
            {
                "pair": pair,
                "order": order_name,
                "input": x,
                "answer": answer,
                "target_switch_step": sweep.switch_step,
                "first_change_step": sweep.change_step,
                "target_language_step": language_step,
                "removed_by_mask": n_removed,
                "generation_at_0": sweep.generations[0],
                "generation_at_mask": sweep.generations[n_removed] if order_name == "weight" else None,
            }
        )
    if not summary:
        return None
    path = xp.current(f"{FOLDER}/fig2_summary_{pair}.csv")
    rows = pd.DataFrame(summary)
    table = pd.concat([read_table(path), rows], ignore_index=True) if path.exists() else rows
    _table(xp, table, f"fig2_summary_{pair}")
    return table


def table8_rows(
    xp: Experiment,
    pair: str,
    *,
    n: int,
    alpha: float | None,
    batch_size: int,
    data_dir: str | None = None,
) -> pd.DataFrame:
    """Table 8: BLEU (the reference's procedure, 0-1) on the first `n` IWSLT 2017 test pairs,
    instructed ("Translate into de:", as the reference writes it), without and with the direction's
    stored mask (heads outside it scaled by `alpha`, default the paper's, `PAPER_TABLE8_ALPHA`), and
    the echo control. `translation/table8_<pair>.csv`; `evaluate` keeps its outputs (and resumes) in
    `translation/table8_<pair>_evaluation/`."""
    full = load_task(f"iwslt2017/{pair}", data_dir)
    task = Task(
        full.name,
        full.pairs[:n],
        full.instruction,
        full.matcher,
        n,
        max_new_tokens=full.max_new_tokens,
        target_language=full.target_language,
    )
    alpha = alpha if alpha is not None else PAPER_TABLE8_ALPHA[pair]
    mask = _stored_mask(xp, pair)
    settings = ("instructed", "instructed + scaled mask", "echo baseline") if mask else ("instructed", "echo baseline")
    config = EvalConfig(alpha=alpha, batch_size=batch_size, settings=settings)
    # the translation mask on IWSLT's pairs
    with timed(xp.out / FOLDER, "analyze", f"{pair}: Table 8 ({len(task.pairs)} IWSLT pairs)"), mask_on_another_task():
        result = evaluate(xp.model, task, mask, config, out_dir=xp.out / FOLDER / f"table8_{pair}_evaluation")
    table = result.table.assign(pair=pair, setting=result.table.setting.replace(setting_names(alpha)))
    table = pd.DataFrame(
        table.rename(columns={"n_examples": "n"})[["pair", "setting", "n", "bleu", "target_language_share"]]
    )
    _table(xp, table, f"table8_{pair}")
    return table
