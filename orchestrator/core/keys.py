"""Every name the project writes into a store (Optuna user attributes; MLflow tags, params,
metrics and artifact paths), each a constant with a one-line meaning.

The constants are plain strings (``trial.user_attrs[RUN_ID]``). :data:`KEYS` lists each with the
places it is written and what it means: the tables of docs/records.md are made from it
(``python -m orchestrator.core.keys``, checked by ``tests/orchestrator/test_keys.py``). A new key is
declared here first, then written through its constant; renaming one breaks every existing store.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

STUDY_ATTR = "Optuna study user attributes"
TRIAL_ATTR = "Optuna trial user attributes"
TRIAL_SYSTEM_ATTR = "Optuna trial system attributes"
EXPERIMENT_TAG = "MLflow experiment tags"
PARENT_TAG = "MLflow parent run: tags"
PARENT_METRIC = "MLflow parent run: metrics"
PARENT_ARTIFACT = "MLflow parent run: artifacts"
TRIAL_TAG = "MLflow trial runs: tags"
TRIAL_PARAM = "MLflow trial runs: params"
TRIAL_METRIC = "MLflow trial runs: metrics"
TRIAL_ARTIFACT = "MLflow trial runs: artifacts"
REPRODUCTION_TAG = "MLflow reproduction runs: tags"
PLACES = (STUDY_ATTR, TRIAL_ATTR, TRIAL_SYSTEM_ATTR, EXPERIMENT_TAG, PARENT_TAG, PARENT_METRIC,
          PARENT_ARTIFACT, TRIAL_TAG, TRIAL_PARAM, TRIAL_METRIC, TRIAL_ARTIFACT, REPRODUCTION_TAG)
RUN_TAG = (PARENT_TAG, TRIAL_TAG)  # the environment: the same on the parent and on each trial


@dataclass(frozen=True)
class Key:
    """One name written to a store, the places (:data:`PLACES`) it is written and its meaning."""

    name: str
    places: tuple[str, ...]
    meaning: str


KEYS: list[Key] = []


def _key(name: str, places: str | tuple[str, ...], meaning: str) -> str:
    KEYS.append(Key(name, (places,) if isinstance(places, str) else places, meaning))
    return name


# --- the Optuna study ------------------------------------------------------------------------
CREATOR = _key("sweep.creator", STUDY_ATTR,
               "the `sweep run` process that created the study (host, pid, start time)")
SUBMITTED = _key("sweep.submitted", STUDY_ATTR,
                 "`sweep submit` created the study: its tasks join at once, so each draws "
                 "trials from a seed of its own (host and pid)")
IDENTITY = _key("sweep.spec", STUDY_ATTR,
                "what makes the sweep the same sweep (space, objective, sampler...); a rerun "
                "must match it")
FINGERPRINT = _key("sweep.fingerprint", (STUDY_ATTR, PARENT_TAG),
                   "hash of that identity; written last, so joining machines wait for it")
GRID_DONE = _key("sweep.grid_enqueued", STUDY_ATTR,
                 "how many grid trials the creator enqueued (once)")
STUDY_ID = _key("sweep.study_id", (STUDY_ATTR, PARENT_TAG),
                "a random id the study gets when it is created: its parent run carries it, so a "
                "study of the same name in another storage never takes that run")
PARENT_RUN = _key("sweep.parent_run_id", STUDY_ATTR,
                  "the MLflow parent run that every machine of the sweep shares")
END_CLAIM = _key("sweep.end_claim", STUDY_ATTR,
                 "the `sweep run` process that does the end of a shared sweep (held-out test, "
                 "export, parent run end) at a number of finished trials, and whether it is done")
COMPARE = _key("sweep.compare", STUDY_ATTR,
               "a comparison's `compare:` block as validated (JSON): the sweep compares levels")

# --- an Optuna trial (several also tag its MLflow run) ----------------------------------------
REPEAT = _key("sweep.repeat", (TRIAL_ATTR, TRIAL_TAG),
              "which repeat of its configuration it is (its seed is `seed` + repeat)")
SEED = _key("sweep.seed", (TRIAL_ATTR, TRIAL_TAG), "the seed it trains with")
PHASE = _key("sweep.phase", (TRIAL_ATTR, TRIAL_TAG),
             "a comparison's phase: tune (searching a level's settings) or confirm (its best "
             "settings on a fresh seed)")
REPLICATE = _key("sweep.replicate", (TRIAL_ATTR, TRIAL_TAG),
                 "a comparison's tuning trial: the tuning replicate it belongs to (k tunes every "
                 "level anew for the confirmation seed seed + k; 0: the one tuning of "
                 "`tuning: once`)")
LEVEL = _key("sweep.level", (TRIAL_ATTR, TRIAL_TAG),
             "the compared level (the factor's value; several factors: `a=x,b=y`): a name, "
             "never read back; a level's values are the trial's parameters")
RUN_ID = _key("sweep.mlflow_run_id", TRIAL_ATTR, "its MLflow run")
OWNER = _key("sweep.owner", TRIAL_ATTR,
             "the `sweep run` process running it (host, pid, start time): a trial whose owner "
             "is dead is an orphan")
HEARTBEAT = _key("sweep.heartbeat", TRIAL_SYSTEM_ATTR,
                 "through a storage proxy (`grpc://`): the wall time of its last heartbeat, "
                 "rewritten every `heartbeat_seconds` by the process running it")
FAIL_REASON = _key("sweep.fail_reason", (TRIAL_ATTR, TRIAL_TAG), "why it failed")
FAIL_KIND = _key("sweep.fail_kind", (TRIAL_ATTR, TRIAL_TAG),
                 "crash (retried within `retries`), interrupt (always retried), store (the "
                 "MLflow store failed under it: always retried) or deterministic (never)")
WILL_RETRY = _key("sweep.will_retry", (TRIAL_ATTR, TRIAL_TAG),
                  "whether a retry of the failed trial is queued")
RETRY_OF = _key("sweep.retry_of", (TRIAL_ATTR, TRIAL_TAG), "the failed trial this one retries")
RETRY_ROOT = _key("sweep.retry_root", TRIAL_ATTR,
                  "the first trial of a chain of retries: owns the checkpoints and counts the "
                  "crashes")
ENQUEUED = _key("sweep.enqueued", TRIAL_ATTR, "true for a configuration the YAML's `enqueue` "
                "lists (tried before any sampled one)")
COPIED_FROM = _key("sweep.copied_from", TRIAL_ATTR,
                   "`NAME#N`: a trial copied from sweep NAME by `warm_start` (sampler history, "
                   "not counted among this sweep's trials, never its best)")
CONSTRAINTS = _key("sweep.constraints", (TRIAL_ATTR, TRIAL_TAG),
                   "each constraint's value at the last epoch (`metric<=max`: metric - max), "
                   "<= 0 when met (Optuna's own copy: the trial's `constraints`)")
FEASIBLE = _key("sweep.feasible", TRIAL_TAG, "true when every constraint is met")
EPOCHS = _key("sweep.epochs", TRIAL_ATTR,
              "the epochs a complete trial of several objectives trained (Optuna takes no "
              "epoch values from such a study; a trial of one objective has them there)")
STOPPED_EARLY = _key("sweep.stopped_early", (TRIAL_ATTR, TRIAL_TAG),
                     "why `patience` stopped the trial before its last epoch (it completes "
                     "with the epochs it ran)")

# --- the MLflow experiment -------------------------------------------------------------------
EXPERIMENT_KIND = _key("mlflow.experimentKind", EXPERIMENT_TAG,
                       "`custom_model_development`: MLflow's model-training experiment type")
NOTE = _key("mlflow.note.content", (EXPERIMENT_TAG, PARENT_TAG),
            "MLflow's description: the experiment's is the sweep's `description`; the parent "
            "run's is the report's headline (a comparison's: its answer's sentence, table and "
            "lines, Markdown), written by `sweep run` at its end and by `sweep report`")
PARENT_NOTE = NOTE  # the parent run's description: the same MLflow tag, on the run
RUNS_VIEW_ID = "sweep"  # the view's key in its tag's name, and in the URL that opens it
RUNS_VIEW = _key(f"mlflow.sharedViewState.{RUNS_VIEW_ID}", EXPERIMENT_TAG,
                 "the runs table's saved view `sweep ui` opens: best objective first, the "
                 "objective's metric and the searched settings as columns; a comparison's: "
                 "its confirmation runs grouped by level, the level's rounded mean "
                 "(`level_mean`) a row")
TUNING_VIEW_ID = "sweep-tuning"  # a comparison's second view: its tuning runs
TUNING_VIEW = _key(f"mlflow.sharedViewState.{TUNING_VIEW_ID}", EXPERIMENT_TAG,
                   "a comparison's saved view of its tuning runs, best objective first; "
                   "`sweep ui` prints its link under the first")

# --- every run -------------------------------------------------------------------------------
ROLE = _key("sweep.role", RUN_TAG + (REPRODUCTION_TAG,), "parent, trial or reproduction")
STUDY = _key("sweep.study", RUN_TAG, "the study (the sweep's name) the run belongs to")
VERSION = _key("sweep.version", RUN_TAG, "this project's version")
PYTHON_VERSION = _key("sweep.python_version", RUN_TAG, "Python's version")
OPTUNA_VERSION = _key("sweep.optuna_version", RUN_TAG, "Optuna's version")
MLFLOW_VERSION = _key("sweep.mlflow_version", RUN_TAG, "MLflow's version")
HOST = _key("sweep.host", RUN_TAG, "the machine's name")
PLATFORM = _key("sweep.platform", RUN_TAG, "the operating system")
GIT_COMMIT = _key("sweep.git_commit", RUN_TAG, "the commit of the working folder (a git checkout)")
GIT_DIRTY = _key("sweep.git_dirty", RUN_TAG, "whether it had uncommitted changes")
GIT_DIFF = _key("sweep.git_diff_sha256", RUN_TAG, "SHA-256 of those uncommitted changes")

# --- the parent run --------------------------------------------------------------------------
STORAGE = _key("sweep.storage", PARENT_TAG, "the Optuna storage (its password masked)")
PREFLIGHT = _key("sweep.preflight", PARENT_TAG, "PASS, WARN, ERROR (a check itself raised; the "
                 "sweep goes on), FAIL or FAIL (forced)")
BEST_RUN_ID = _key("sweep.best_run_id", PARENT_TAG, "the best trial's run so far")
BEST_TRIAL = _key("sweep.best_trial", PARENT_TAG, "the best trial's number so far")
PARETO_FRONT = _key("sweep.pareto_front", PARENT_TAG,
                    "several objectives: the numbers of the Pareto front's trials so far")
STOP_REASON = _key("sweep.stop_reason", PARENT_TAG,
                   "why `stop_when` ended the sweep before `trials`")
TEST_TRIALS = _key("sweep.test_trials", PARENT_TAG,
                   "the trials whose weights saw the held-out test split")
VERDICT = _key("sweep.verdict", PARENT_TAG,
               "a comparison's answer in one sentence (the level it names and its strongest "
               "evidence)")
ANSWER = _key("sweep.answer", (STUDY_ATTR, PARENT_TAG),
              "a finished comparison's one answer: the level it names, its mean over the "
              "confirmation seeds, and which confirmation run's weights stand for it. The "
              "parent run's tag is its text; the study's record (JSON) holds `level` (the "
              "level's text), `values` (its value of each factor), `mean`, `half` (the 95% "
              "interval's half-width of that mean: its rounding), `seeds`, `trial`, `text` "
              "and, when a tuned optimum lies on the edge of its range, `edges` (that line)")
BEST_VALUE = _key("best_value", PARENT_METRIC, "the best objective so far (step: trials "
                  "finished); a finished comparison's: the named level's confirmed mean")
SPEC_FILE = _key("sweep.yaml", PARENT_ARTIFACT, "the sweep YAML as written")
RESOLVED_FILE = _key("sweep.resolved.yaml", PARENT_ARTIFACT, "the sweep with every default filled")
PREFLIGHT_DIR = _key("preflight", PARENT_ARTIFACT, "the preflight's JSON, Markdown and images")
REPORT_DIR = _key("report", PARENT_ARTIFACT, "`sweep report --log`'s files")
COMPARISON_CSV = _key("report/comparison.csv", PARENT_ARTIFACT,
                      "a comparison's paired results, a row per pair of levels, in the "
                      "columns of `orchestrator.stats.CSV_COLUMNS` (listed in compare.md)")

EXPECTED_BEST_CSV = _key("report/expected_best.csv", PARENT_ARTIFACT,
                         "a comparison's expected best tuning score after 1, 2, ... trials per "
                         "level, with its 95% t interval over the level's tunings "
                         "(`orchestrator.answer.budget.CSV_COLUMNS`)")

# --- a trial run -----------------------------------------------------------------------------
PARENT_RUN_ID = _key("mlflow.parentRunId", TRIAL_TAG, "its parent run (nests it in the UI)")
TRIAL_NUMBER = _key("sweep.trial_number", TRIAL_TAG, "its Optuna trial number")
STATE = _key("sweep.state", TRIAL_TAG,
             "complete, pruned, failed or interrupted: the run ends FINISHED when complete or "
             "pruned (this tag tells them apart), FAILED when failed, KILLED when interrupted")
WORKER = _key("sweep.worker", TRIAL_TAG, "the worker slot that trained it")
CONFIG = _key("sweep.config", TRIAL_TAG,
              "its configuration in short, without the seed (the run's name is it plus `s<seed>`):"
              " MLflow's Group by on it shows one line per configuration, a band over seeds")
CUDA_VISIBLE_DEVICES = _key("sweep.cuda_visible_devices", TRIAL_TAG, "the worker's GPUs")
TORCH_THREADS = _key("sweep.torch_threads", (TRIAL_TAG, REPRODUCTION_TAG),
                     "the worker's torch threads (curves differ in the last bits across counts)")
TORCH_VERSION = _key("sweep.torch_version", TRIAL_TAG, "torch's version")
CUDA_VERSION = _key("sweep.cuda_version", TRIAL_TAG, "CUDA's version (empty without CUDA)")
CUDNN_VERSION = _key("sweep.cudnn_version", TRIAL_TAG, "cuDNN's version")
DEVICE = _key("sweep.device", TRIAL_TAG, "the device it trained on (cpu, cuda)")
DEVICE_NAME = _key("sweep.device_name", TRIAL_TAG, "the GPU's or the processor's name")
RESUMED_FROM = _key("sweep.resumed_from_epoch", TRIAL_TAG,
                    "the checkpoint's epoch it went on from (0: it started afresh)")
CHECKPOINT_DISCARDED = _key("sweep.checkpoint_discarded", TRIAL_TAG,
                            "why its checkpoint could not be read: it started over from epoch 0")
WARNINGS = _key("sweep.warnings", TRIAL_TAG, "the trainer's distinct warnings, one a line")
EXPORTED = _key("sweep.exported", TRIAL_TAG, "true once its weights were exported")
EXPORT_ERROR = _key("sweep.export_error", TRIAL_TAG, "why the export failed as a whole")
EXPORT_FORMAT = _key("sweep.export.<format>", TRIAL_TAG,
                     "passed, failed (parity) or `error: ...`, one tag per export format")
EXPORT_METHOD = _key("sweep.export.<format>.method", TRIAL_TAG,
                     "how a format was made: torchscript script or trace, int8 static or dynamic")
TEST_ERROR = _key("sweep.test_error", TRIAL_TAG, "why its test-split evaluation failed")
SETTING = _key("<setting>", TRIAL_PARAM,
               "every resolved trainer setting the trial reads, one param each: `momentum` and "
               "`nesterov` for sgd (or a user `module:function` optimizer, given the settings "
               "whole) only, not for adam, adamw or `torch:NAME` (which takes "
               "`optimizer_args`); `min_lr`, `gamma`, `step_size_epochs`, `pct_start`, "
               "`div_factor`, `final_div_factor`, `decay_fraction` for the built-in schedules "
               "that use them (none for a user schedule); `reference_batch_size` unless "
               "`lr_scaling: none`. `sweep validate` refuses such a setting in `train` or "
               "`space` when no trial of the sweep reads it")
LR_EFFECTIVE = _key("lr_effective", TRIAL_PARAM, "the learning rate after `lr_scaling`")
EPOCH_METRIC = _key("<epoch metric>", TRIAL_METRIC,
                    "train_loss, train_acc, val_loss, val_acc, ... (step: epoch)")
LR = _key("lr", TRIAL_METRIC, "the learning rate of every optimizer step (step: global step)")
TRAIN_SECONDS = _key("train_seconds", TRIAL_METRIC, "the trial's training time")
LEVEL_MEAN = _key("level_mean", TRIAL_METRIC,
                  "a decided comparison's confirmation run: its level's mean objective over its "
                  "confirmation seeds, rounded as the report's table of levels rounds it, in "
                  "the metric's units (the table's 98.72 % is 0.9872): the comparison's MLflow "
                  "view shows it a row a level")
VAL_ITEMS = _key("val_items", TRIAL_METRIC, "the validation items each val_* metric counts: "
                 "an accuracy moves in steps of 1 / val_items")
EXPORT_SECONDS = _key("export_seconds", TRIAL_METRIC,
                      "the export of the best trial, timed apart from its training")
EXPORT_FIGURES = _key("sweep.export_figures", TRIAL_TAG,
                      "an export's parity, size and latency figures, `{format: {figure: value}}` "
                      "(JSON, for programs; people read `export/parity.csv`)")
TEST_METRIC = _key("test_<metric>", (TRIAL_METRIC, PARENT_METRIC),
                   "the held-out test split (on the parent: the mean, and `_std` over repeats)")
SYSTEM_CPU = _key("system/cpu_percent", TRIAL_METRIC,
                  "CPU of the worker's processes while it trained, 100 = one core (step: "
                  "sample, every few seconds)")
SYSTEM_RSS = _key("system/rss_mb", TRIAL_METRIC, "resident memory of the worker's processes, MiB")
SYSTEM_GPU = _key("system/gpu_<id>_<figure>", TRIAL_METRIC,
                  "on CUDA, each of the trial's GPUs (`<id>` as in `CUDA_VISIBLE_DEVICES`): "
                  "`utilization_percent` (NVML, the whole device) and `memory_mb` (the worker's)")
SETTINGS_FILE = _key("settings.yaml", TRIAL_ARTIFACT, "every resolved setting of the trial")
PACKAGES_FILE = _key("environment/packages.txt", TRIAL_ARTIFACT, "the installed packages")
WEIGHTS_DIR, WEIGHTS_FILE = "model", "weights.pt"
_key(f"{WEIGHTS_DIR}/{WEIGHTS_FILE}", TRIAL_ARTIFACT, "the final weights (a state dict)")
EXPORT_DIR = _key("export", TRIAL_ARTIFACT, "the exported model files and `export.json`")
PARITY_FILE = _key("export/parity.csv", TRIAL_ARTIFACT,
                   "an export's figures as a table: a row per format (and `eager`), its parity "
                   "(passed, max_abs_diff, top1_agreement...), size and ms per image")
ONNX_MODEL = _key("model_onnx", TRIAL_ARTIFACT,
                  "the best trial's ONNX file as an MLflow model (when it passed parity)")

# --- a reproduction run ----------------------------------------------------------------------
REPRODUCES = _key("sweep.reproduces", REPRODUCTION_TAG, "the trial run it trained again")


def export_tag(fmt: str, method: bool = False) -> str:
    """The tag of export format ``fmt`` (:data:`EXPORT_FORMAT`), or of how it was made."""
    return f"sweep.export.{fmt}" + (".method" if method else "")


def gpu_metric(gpu: str, figure: str) -> str:
    """The metric of ``figure`` of GPU ``gpu`` (:data:`SYSTEM_GPU`)."""
    return f"system/gpu_{gpu}_{figure}"


def markdown() -> str:
    """docs/records.md's tables: one per place, a row per key written there."""
    out: list[str] = []
    for place in PLACES:
        out += [f"**{place}**", "", "| name | meaning |", "| --- | --- |"]
        out += [f"| `{k.name}` | {k.meaning} |" for k in KEYS if place in k.places]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
