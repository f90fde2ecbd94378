"""`evaluate`: the paper's comparison table (Sec. 3.4) for one task and mask, with every output
behind it, resumable from the settings an interrupted run finished.

The pieces, in order: the settings to run are chosen from the registry (`SETTINGS`) and every
argument is checked; the prompts are encoded once per prompt kind (bare, instructed) and handed to
the loss and to generation; each setting runs (or is taken from `results.partial.csv`) and is scored
from its outputs (`RowScorer`, the same scoring `rescore` applies to stored outputs); with `out_dir`
the table and the generations are written as one set under the folder's lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._distributed import from_rank0, rank_and_world
from .._io import OutputSet, atomic_write, atomic_write_json, check_unclaimed, locked_folder, read_table
from .._progress import progress
from .._validate import check_out_dir
from .._warnings import warn
from ..data import Task
from ..data._tokenize import EncodedSplit, encode_split
from ..gates import gate_kind
from ..masks import HeadMask
from ..models import check_ranks_agree, fingerprint, identity_differences, run_identity
from ..models._sharding import every_rank, is_sharded
from ._answers import answer_nll_per_example, answers_and_nll, rank_rows, reduce_nll
from ._config import EvalConfig
from ._scoring import Labels, instructed_rows_left_out, task_labels
from ._settings import SETTINGS, EvalSetting
from ._table import Evaluation, RowScorer, concat_generations, generation_rows

RESULTS, GENERATIONS, RECORD = "results.csv", "generations.csv", "evaluation.json"
PARTIAL_RESULTS = "results.partial.csv"  # the finished settings of an interrupted run: the next run resumes
PARTIAL_GENERATIONS = "generations.partial.csv"
PARTIAL_RECORD = "evaluation.partial.json"  # whose rows they are: model, task, masks and options
_NEED_TEXT = {
    "instruction": "an instruction (the task has none)",
    "value gate": "the value gate (gate is 'query')",
    "mask": "a mask (mask is None)",
    "other mask": "other_mask",
    "labels": "a label task (task_labels is None)",
    "generation": "generate=True (it is scored from outputs)",
}


class MaskTaskWarning(UserWarning):
    """`evaluate` was given a mask trained for another task (its metadata's `task`): often a mistake,
    sometimes the design (a mask carried to few-shot prompts, Table 8's IWSLT pairs); filter this
    category where it is the design."""


def _as_head_mask(name: str, mask: HeadMask | Tensor, model: TransformerBridge) -> HeadMask:
    if isinstance(mask, HeadMask):
        return mask
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a HeadMask or a [n_layers, n_heads] tensor, not {type(mask).__name__}")
    return HeadMask(mask.detach().float().cpu(), model=fingerprint(model))


def _digest(mask: HeadMask | None) -> str | None:
    if mask is None:
        return None
    parts = [mask.values] + ([mask.mlp_values] if mask.mlp_values is not None else [])
    return hashlib.sha256(b"".join(p.float().contiguous().numpy().tobytes() for p in parts)).hexdigest()


def _task_digest(task: Task) -> str:
    fields = (task.pairs, task.instruction, task.shots, task.matcher, task.n_eval, task.char_level)
    fields += (task.max_new_tokens, task.target_language)
    return hashlib.sha256(repr(fields).encode()).hexdigest()


@dataclass
class _EvaluationPlan:
    """What one call runs, decided and checked before any model run."""

    runs: list[EvalSetting]  # settings that run the model, in registry order
    controls: list[EvalSetting]  # then the controls
    masks: dict[str, HeadMask | None]  # EvalSetting.mask -> the mask it names
    mask_task: str | None
    inputs: list[str]
    answers: list[str]
    labels: Labels | None
    text_style: str | None
    split: bool = False  # the examples of every setting are split over the ranks of the process group


def _plan(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask | Tensor | None,
    config: EvalConfig,
    other_mask: HeadMask | Tensor | None,
) -> _EvaluationPlan:
    # A plain [n_layers, n_heads] tensor works as everywhere else.
    head_mask = _as_head_mask("mask", mask, model) if mask is not None else None
    other = _as_head_mask("other_mask", other_mask, model) if other_mask is not None else None
    if head_mask is not None:
        head_mask.check_model(model)
    if other is not None:
        other.check_model(model, allow_other_weights=True)  # the paper's base <-> instruct swap
    indices = task.split_indices(config.split)
    inputs, answers = [task.pairs[i][0] for i in indices], [task.pairs[i][1] for i in indices]
    labels = task_labels(task)
    have = {
        "instruction": task.instruction is not None,
        "value gate": gate_kind(config.gate).alpha,  # alpha scaling: a gate that scales heads (the value gate)
        "mask": head_mask is not None,
        "other mask": other is not None,
        "labels": labels is not None,
        "generation": config.generate,
    }
    unknown = [name for name in config.settings if name not in SETTINGS]
    if unknown:
        raise ValueError(f"settings: unknown {unknown}; registered: {list(SETTINGS)}")
    chosen = [s for s in SETTINGS.values() if not config.settings or s.name in config.settings]
    lacking = {s.name: [_NEED_TEXT[n] for n in s.needs if not have[n]] for s in chosen}
    if config.settings:
        unmet = [f"{name!r} needs {', '.join(needs)}" for name, needs in lacking.items() if needs]
        if unmet:
            raise ValueError(f"settings unavailable here: {'; '.join(unmet)}")
    if not config.settings and not have["instruction"]:
        warn(instructed_rows_left_out(task))
    chosen = [s for s in chosen if not lacking[s.name]]
    if not chosen:
        raise ValueError("no setting to run: every registered setting lacks something here (mask is None?)")
    mask_task = head_mask.metadata.get("task") if head_mask is not None else None  # recorded by training
    if mask_task is not None and mask_task != task.name:
        warn(f"the mask was trained for task {mask_task!r}, not {task.name!r} (column mask_task)", MaskTaskWarning)
    if config.text_metrics == "auto":  # translation by its target language: Chinese answers have no spaces
        text = task.is_translation or sum(len(a.split()) for a in answers) / len(answers) > 2
    else:
        text = config.text_metrics == "on"
    return _EvaluationPlan(
        runs=[s for s in chosen if not s.is_control],
        controls=[s for s in chosen if s.is_control],
        masks={
            "none": None,
            "mask": head_mask,
            "shuffled": head_mask.shuffled(config.random_seed) if head_mask is not None else None,
            "other": other,
        },
        mask_task=mask_task,
        inputs=inputs,
        answers=answers,
        labels=labels if config.generate else None,
        text_style=config.text_style if text else None,
    )


@every_rank
def evaluate(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask | Tensor | None,
    config: EvalConfig = EvalConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    other_mask: HeadMask | Tensor | None = None,
    out_dir: str | os.PathLike | None = None,
    distributed: bool = False,
) -> Evaluation:
    """The paper's comparison table for one task and mask, one row per setting, and every output behind it.

    Settings (`SETTINGS`, in that order; `config.settings` picks some): original, instructed, masked,
    random mask (`mask.shuffled(config.random_seed)`, as many heads), other model's mask
    (`other_mask`, e.g. the base model's), instructed + scaled mask (heads outside the mask scaled by
    `config.alpha`; value gate only), then the controls, which need no model: "echo baseline" (each
    output is the bare input) and, for label tasks, "majority label" (each output is the most
    frequent label of the training pairs). By default every setting runs whose needs are met (an
    instruction, the value gate, a mask, `other_mask`, a label task); one named in `config.settings`
    whose needs are not met is a ValueError. `mask` may be a `HeadMask`, a `[n_layers, n_heads]`
    tensor, or None when no chosen setting needs it. A mask trained for another task (its metadata)
    warns; its task is the column `mask_task`.

    Columns: `answer_nll` (nats: each example's mean answer-token cross-entropy, averaged over
    examples; the paper's "PPL"), `perplexity` (exp of the token-pooled cross-entropy: a true
    perplexity), `n_kept`, `alpha`, and from the greedy outputs (`config.generate`): `accuracy` (the
    task's matcher) and `strict` with 95% Wilson bounds, `echo` and `empty` counts, for label tasks
    `balanced_accuracy` and `predicted_labels` (`score_outputs`), exact McNemar p-values of masked
    rows against the original and instructed rows (`p_vs_original`, `p_vs_instructed`; NaN when
    those rows are not run), and the text metrics: with `text_style="paper"` `rouge_l` and `bleu`
    (Table 8's mean sentence BLEU, 0-1; `paper_rouge_l`, `paper_bleu`), with `"first_line"`
    `rouge_l_first_line` and `sacrebleu_first_line` (0-100) on the first line; translation tasks
    also get `target_language_share`. `text_metrics="auto"` shows them for every translation task
    and answers of more than two words on average (on one-word answers they restate accuracy).

    The prompts are rendered and tokenised once per prompt kind (`encode_split`); the loss and the
    generation of every setting read them. `config.progress` shows a progress bar per setting.

    With `out_dir`, the folder is locked for the call (a second writer is refused); each finished
    setting is kept in `results.partial.csv` and `generations.partial.csv` (with
    `evaluation.partial.json`, which records the model, task, masks and options), a rerun resumes
    from them, and at the end `results.csv`, `generations.csv` and `evaluation.json` are written as
    one set (all or nothing) and the partial files removed. Partial files of another model, task,
    mask or options are refused with a ValueError naming what differs.

    `distributed=True` (an initialised `torch.distributed` group; always on a model loaded with
    `shard="fsdp"`) splits every setting's examples over the ranks: every rank returns the whole
    table, equal to one process's; rank 0 alone locks and writes `out_dir` and decides what an
    interrupted run resumes (the others learn it from rank 0, so no shared folder is needed).
    """
    out = check_out_dir(out_dir, "out_dir") if out_dir is not None else None  # before any work
    plan = _plan(model, task, mask, config, other_mask)
    # Every prompt kind is encoded before anything runs: a pair that cannot be tokenised fails first.
    encoded = {
        flag: encode_split(model, task, config.split, flag) for flag in dict.fromkeys(s.instructed for s in plan.runs)
    }
    plan.split = distributed or is_sharded(model)
    rank, world = rank_and_world(required=True) if plan.split else (0, 1)
    if world > 1:  # before the first pass: ranks of other tasks or masks would merge unrelated rows
        check_ranks_agree(_identity(model, task, config, plan), "evaluation")
    if out is None:
        return _run(model, task, config, plan, encoded, None, {})
    folder = _RunFolder(out, _identity(model, task, config, plan), plan)
    with contextlib.ExitStack() as held:

        def prepare() -> dict[str, tuple[dict, list[str]]]:
            held.enter_context(locked_folder(folder.path, "out_dir"))
            check_unclaimed(folder.path, "evaluate", (RESULTS, GENERATIONS, RECORD), "out_dir")  # before any work
            folder.check_finished()
            finished = folder.resume()
            if finished:  # a rerun goes on where the interrupted one stopped, and says so
                print(  # noqa: T201 (a note for the user on stderr)
                    f"resuming: {len(finished)} of {len(plan.runs)} settings finished by an earlier run are taken "
                    f"from {folder.path / PARTIAL_RESULTS} ({', '.join(finished)})",
                    file=sys.stderr,
                )
            return finished

        # Over several ranks rank 0 holds the folder; the others learn what it resumes (or its error).
        finished = from_rank0(prepare) if world > 1 else prepare()
        result = _run(model, task, config, plan, encoded, folder if rank == 0 else None, finished)
        if rank == 0:
            folder.commit(result, config)
    return result


def _run(
    model: TransformerBridge,
    task: Task,
    config: EvalConfig,
    plan: _EvaluationPlan,
    encoded: dict[bool, EncodedSplit],
    folder: _RunFolder | None,
    finished: dict[str, tuple[dict, list[str]]],
) -> Evaluation:
    scorer = RowScorer(
        task,
        plan.inputs,
        plan.answers,
        plan.labels,
        text_style=plan.text_style,
        language_share=task.is_translation,
    )
    rows, parts = [], []

    def add(record: dict, outputs: list[str]) -> None:
        row = dict(record)
        if config.generate:
            scores, per = scorer.score(record["setting"], outputs)
            row.update(scores)
            parts.append(generation_rows(task.name, record["setting"], plan.inputs, plan.answers, outputs, per))
        rows.append(row)

    for setting in plan.runs:
        if setting.name in finished:
            add(*finished[setting.name])
            continue
        add(*_run_setting(model, task, config, plan, setting, encoded[setting.instructed]))
        if folder is not None:  # an interruption keeps the finished settings
            folder.save(pd.DataFrame.from_records(rows), concat_generations(parts) if config.generate else None)
    for control in plan.controls:
        record = {
            "task": task.name,
            "setting": control.name,
            "instructed": False,
            "alpha": float("nan"),
            "n_kept": float("nan"),
            "n_examples": len(plan.answers),
            "answer_nll": float("nan"),
            "perplexity": float("nan"),
        }
        assert control.control is not None  # plan.controls holds the settings that have one
        add(record, control.control(task, config.split, plan.inputs, plan.labels))
    return Evaluation(table=pd.DataFrame.from_records(rows), generations=concat_generations(parts))


def _run_setting(
    model: TransformerBridge,
    task: Task,
    config: EvalConfig,
    plan: _EvaluationPlan,
    setting: EvalSetting,
    encoded: EncodedSplit,
) -> tuple[dict, list[str]]:
    """(the row's model columns, the outputs) of one setting (`plan.split`: its examples over the ranks)."""
    mask = plan.masks[setting.mask]
    alpha = config.alpha if setting.scaled else 0.0
    n = len(encoded)
    share = rank_rows(model, n, plan.split)  # the bar counts this rank's rows
    with progress(
        total=n if share is None else len(share[1]),
        desc=f"{task.name}: {setting.name}",
        unit="ex",
        enabled=config.progress,
        delay=0.0,
    ) as bar:  # generations and the loss in one pass over the examples (or the loss alone)
        if config.generate:
            outputs, sums, counts = answers_and_nll(
                model,
                encoded,
                mask=mask,
                alpha=alpha,
                gate=config.gate,
                max_new_tokens=config.max_new_tokens or task.max_new_tokens,
                batch_size=config.batch_size,
                advance=bar.update,
                distributed=plan.split,
            )
        else:
            outputs = []
            sums, counts = answer_nll_per_example(
                model,
                encoded,
                mask=mask,
                alpha=alpha,
                gate=config.gate,
                batch_size=config.batch_size,
                advance=bar.update,
                distributed=plan.split,
            )
    record = {
        "task": task.name,
        "mask_task": plan.mask_task,
        "setting": setting.name,
        "instructed": setting.instructed,
        "alpha": alpha,
        "n_kept": mask.n_kept if mask is not None else model.cfg.n_layers * model.cfg.n_heads,
        "n_examples": n,
        "answer_nll": reduce_nll(sums, counts, "example"),
        "perplexity": math.exp(reduce_nll(sums, counts, "token")),
    }
    return record, outputs


# ------------------------------------------------------------------------------------ run folder
def _identity(model: TransformerBridge, task: Task, config: EvalConfig, plan: _EvaluationPlan) -> dict:
    """Everything that decides the numbers of a row: the model (by content), its prompt format, the
    task (by content), the masks, the options and the library version."""
    return run_identity(
        model,
        task=task.name,
        data=_task_digest(task),
        mask=_digest(plan.masks["mask"]),
        other_mask=_digest(plan.masks["other"]),
        config=config.identity(),
    )


class _RunFolder:
    """The output folder of one `evaluate` call: its partial files and its final output set."""

    def __init__(self, path: Path, identity: dict, plan: _EvaluationPlan) -> None:
        self.path, self.identity, self.plan = path, identity, plan
        self._recorded = False

    def resume(self) -> dict[str, tuple[dict, list[str]]]:
        """The settings an interrupted run of the same evaluation finished: name -> (model columns,
        outputs). Partial files of another evaluation are a ValueError."""
        partial = self.path / PARTIAL_RESULTS
        if not partial.is_file():
            for name in (PARTIAL_GENERATIONS, PARTIAL_RECORD):  # left by a run killed before its first row
                (self.path / name).unlink(missing_ok=True)
            return {}
        afresh = f"delete {PARTIAL_RESULTS}, {PARTIAL_GENERATIONS} and {PARTIAL_RECORD} there to start afresh"
        try:
            saved = json.loads((self.path / PARTIAL_RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"{partial} has no readable {PARTIAL_RECORD} (whose rows they are); {afresh}") from error
        differences = self._differences(saved if isinstance(saved, dict) else {})
        if differences:
            raise ValueError(
                f"{partial} holds the finished settings of another evaluation: it differs in "
                f"{'; '.join(differences)}. Rerun with the same model, task, masks and options to resume it, or {afresh}"
            )
        self._recorded = True
        try:
            table = read_table(
                partial,
                keep_default_na=False,
                na_values=[""],
                dtype={"task": str, "setting": str, "mask_task": str},
            )
            texts = None
            if self.identity["config"]["generate"] and (self.path / PARTIAL_GENERATIONS).is_file():
                text = {"task": str, "setting": str, "input": str, "answer": str, "output": str}
                texts = pd.read_csv(self.path / PARTIAL_GENERATIONS, keep_default_na=False, dtype=text)
            finished = {}
            for row in table.to_dict("records"):
                outputs = self._outputs(texts, row["setting"])
                if int(row["n_examples"]) == len(self.plan.answers) and outputs is not None:
                    finished[str(row["setting"])] = (_model_columns(row), outputs)
        except (KeyError, ValueError, pd.errors.ParserError) as error:
            raise ValueError(f"{partial} cannot be read ({error}); {afresh}") from error
        return finished

    def check_finished(self) -> None:
        """A finished evaluation in the folder (`evaluation.json`) of other inputs or options is refused
        before any work: a rerun replaces only its own results (a newer library version may)."""
        path = self.path / RECORD
        if not path.is_file():
            return
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        saved = {
            k: v for k, v in (saved if isinstance(saved, dict) else {}).items() if k not in ("settings", "version")
        }
        differences = self._differences({**saved, "version": self.identity.get("version")})
        if differences:
            raise ValueError(
                f"out_dir {self.path} holds the evaluation of another run ({RECORD}): it differs in "
                f"{'; '.join(differences)}. Choose another out_dir, or move those results away first (CLI: --fresh)"
            )

    def _differences(self, saved: dict) -> list[str]:
        """How a recorded evaluation differs from this one (empty: the same evaluation)."""
        return identity_differences(
            saved, self.identity, nested={"config": ""}, labels={"data": "task data (its content hash)"}
        )

    def _outputs(self, texts: pd.DataFrame | None, setting: str) -> list[str] | None:
        if not self.identity["config"]["generate"]:
            return []
        if texts is None:
            return None
        group = texts.loc[texts.setting == setting].sort_values(by="example", kind="mergesort")
        if group.example.tolist() != list(range(len(self.plan.answers))):
            return None  # not every output was kept: the setting runs again
        return group.output.tolist()

    def save(self, table: pd.DataFrame, generations: pd.DataFrame | None) -> None:
        """Keep the finished settings (the outputs first: a row is only ever kept with its outputs)."""
        if not self._recorded:
            atomic_write_json(self.path / PARTIAL_RECORD, self.identity)
            self._recorded = True
        if generations is not None:
            atomic_write(self.path / PARTIAL_GENERATIONS, lambda tmp: generations.to_csv(tmp, index=False))
        atomic_write(self.path / PARTIAL_RESULTS, lambda tmp: table.to_csv(tmp, index=False))

    def commit(self, result: Evaluation, config: EvalConfig) -> list[Path]:
        """Write results.csv, generations.csv and evaluation.json as one set; drop the partial files."""
        stage = OutputSet(self.path, "evaluate")
        result.table.to_csv(stage.path / RESULTS, index=False)
        if config.generate:
            result.generations.to_csv(stage.path / GENERATIONS, index=False)
        atomic_write_json(stage.path / RECORD, {**self.identity, "settings": result.table.setting.tolist()})
        written = stage.commit()
        for name in (PARTIAL_RESULTS, PARTIAL_GENERATIONS, PARTIAL_RECORD):
            (self.path / name).unlink(missing_ok=True)
        return written


def _model_columns(row: dict) -> dict:
    """A finished setting's model columns as a fresh run gives them (types as computed, not as parsed)."""
    mask_task = row["mask_task"]
    return {
        "task": str(row["task"]),
        "mask_task": None if not isinstance(mask_task, str) else mask_task,
        "setting": str(row["setting"]),
        "instructed": bool(row["instructed"]),
        "alpha": float(row["alpha"]),
        "n_kept": int(row["n_kept"]),
        "n_examples": int(row["n_examples"]),
        "answer_nll": float(row["answer_nll"]),
        "perplexity": float(row["perplexity"]),
    }
