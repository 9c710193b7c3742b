"""User code in the styles people write it (tests/corpus.py): `sweep doctor` gives each a
verdict, `sweep run` trains the ones that can train, and the others are refused with one line
naming the check and the fix; never a traceback, never an ERROR of the checker itself."""
import json

import pytest

from orchestrator.config.spec import validate
from orchestrator.core.errors import SpecError
from tests.conftest import ROOT, run_cli, tiny_spec
from tests.corpus import write_one_size_folder
from tests.datasets import write_image_folder

pytestmark = pytest.mark.slow  # end to end: sweep doctor and sweep run on each style of user code

# one torch thread: the doctor's checks run in the CLI process, on a shared 2-core machine
USER_CODE = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
PREFLIGHT = {"overfit_steps": 50}  # enough to pass or warn; a FAIL comes from the code's bug

MODELS_TRAINED = ["tests.corpus:lazy", "tests.corpus:module_dict",
                  "tests.corpus:batchnorm_dropout", "torchvision:mobilenet_v3_small"]
MODELS_REFUSED = {  # model -> (the check that FAILs, words of its fix)
    "tests.corpus:logits_and_aux": ("gradients", "return the logits alone"),
    "tests.corpus:dict_output": ("gradients", "return the logits alone"),
    "tests.datasets:softmax_model": ("loss_wiring", "drop the softmax"),
    "tests.datasets:plain_list_model": ("registration", "nn.ModuleList")}
DATASETS_TRAINED = ["tests.corpus:numpy_images", "tests.corpus:numpy_labels",
                    "tests.corpus:grayscale", "tests.corpus:rgba", "tests.corpus:tiny"]
DATASETS_REFUSED = {
    "tests.corpus:dict_items": ("data", "return (image, label) tuples"),
    "tests.corpus:pil_images": ("data", "ToTensor()"),
    "tests.corpus:uint8_tensors": ("inputs", "normalise"),
    "tests.corpus:one_hot": ("labels", "label.argmax()"),
    "tests.corpus:several_sizes": ("data", "transforms.Resize"),
    "tests.datasets:float_label_dataset": ("labels", "torch.long")}


def corpus_spec(train: dict, space: dict) -> dict:
    """A grid of one-epoch trials, one per value of ``space``'s one setting (two workers of one
    torch thread each)."""
    fixed = {"dataset": "digits", "model": "small_cnn", "epochs": 1, "batch_size": 16, **train}
    spec = tiny_spec(train={k: v for k, v in fixed.items() if k not in space}, space=space,
                     sampler={"name": "grid"}, workers=2, preflight=PREFLIGHT)
    spec.pop("trials")
    return spec


def doctor(tmp_path, write_spec, spec: dict):
    """`sweep doctor` of ``spec``: the process and each configuration's report by label."""
    out = tmp_path / "evidence"
    done = run_cli("doctor", str(write_spec(spec)), "--out", str(out), cwd=tmp_path,
                   env=USER_CODE)
    assert "Traceback" not in done.stderr + done.stdout
    found = json.loads((out / "preflight.json").read_text())["configurations"]
    return done, {r["label"]: r["report"] for r in found}


def assert_verdicts(done, reports, setting: str, fixed: str, trained, refused) -> None:
    """Trainable code PASSes or WARNs; refused code FAILs the expected check, with one line
    naming it and its fix; the checker itself never raises."""
    def label(value):
        return f"{fixed} / {value}" if setting == "model" else f"{value} / {fixed}"

    assert set(reports) == {label(v) for v in [*trained, *refused]}
    for report in reports.values():
        assert all(c["status"] != "ERROR" for c in report["checks"]), report
    for value in trained:
        assert reports[label(value)]["status"] in ("PASS", "WARN"), reports[label(value)]
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    for value, (check, fix) in refused.items():
        assert reports[label(value)]["status"] == "FAIL"
        prefix = f"sweep: preflight {label(value)}: {check} FAIL"
        assert [line for line in lines if line.startswith(prefix) and fix in line], \
            (value, done.stderr)
    assert all(label(v) not in done.stderr for v in trained)


def assert_trains(stores, spec_path, count: int) -> None:
    """`sweep run` (preflight on, no --force) trains every configuration for one epoch."""
    done = run_cli("run", str(spec_path), cwd=stores.dir, env=USER_CODE)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    trials = stores.study("tiny").trials
    assert len(trials) == count
    assert all(t.state.name == "COMPLETE" and len(t.intermediate_values) == 1 for t in trials)
    (parent,) = stores.runs("tiny", "parent")
    assert parent.data.tags["sweep.preflight"] in ("PASS", "WARN")


def test_doctor_judges_each_model_style(tmp_path, write_spec):
    done, reports = doctor(tmp_path, write_spec, corpus_spec(
        {"dataset": "tests.corpus:numpy_images"},
        {"model": [*MODELS_TRAINED, *MODELS_REFUSED]}))
    assert_verdicts(done, reports, "model", "tests.corpus:numpy_images", MODELS_TRAINED,
                    MODELS_REFUSED)
    lazy = reports["tests.corpus:numpy_images / tests.corpus:lazy"]
    registration = next(c for c in lazy["checks"] if c["name"] == "registration")
    assert registration["evidence"] == "2276 parameters, all registered"  # 8*3*9+8 + 512*4+4


def test_sweep_run_trains_each_model_style_without_force(stores, write_spec):
    path = write_spec(corpus_spec({"dataset": "tests.corpus:numpy_images"},
                                  {"model": MODELS_TRAINED}))
    assert_trains(stores, path, len(MODELS_TRAINED))


def test_doctor_judges_each_dataset_style(tmp_path, write_spec):
    write_image_folder(tmp_path / "images")  # images of several sizes: image_size is needed
    refused = {**DATASETS_REFUSED, "image_folder": ("data", "image_size is needed")}
    done, reports = doctor(tmp_path, write_spec, corpus_spec(
        {"model": "tests.corpus:pooled", "data_dir": str(tmp_path / "images"), "num_workers": 0},
        {"dataset": [*DATASETS_TRAINED, *refused]}))
    assert_verdicts(done, reports, "dataset", "tests.corpus:pooled", DATASETS_TRAINED, refused)
    assert "differ in size" in done.stderr


def test_sweep_run_trains_each_dataset_style(stores, write_spec):
    write_one_size_folder(stores.dir / "images")  # no image_size: the images' own 10 x 12
    trained = [*DATASETS_TRAINED, "image_folder"]
    path = write_spec(corpus_spec({"model": "tests.corpus:pooled", "num_workers": 0,
                                   "data_dir": str(stores.dir / "images")},
                                  {"dataset": trained}))
    assert_trains(stores, path, len(trained))
    (parent,) = stores.runs("tiny", "parent")
    local = stores.client().download_artifacts(parent.info.run_id, "preflight/preflight.json",
                                               str(stores.dir))
    reports = {r["label"]: r["report"] for r in json.loads(open(local).read())["configurations"]}
    data = reports["image_folder / tests.corpus:pooled"]["checks"][0]
    assert data["evidence"].endswith("2 classes, images 3x10x12")


def test_a_dataset_setting_left_out_is_named_in_train_not_on_a_searched_value():
    with pytest.raises(SpecError) as e:
        validate(tiny_spec(train={"dataset": "image_folder", "epochs": 1},
                           space={"lr": [0.01, 0.1]}))
    (line,) = e.value.lines
    assert line.startswith("<sweep>: train.data_dir is needed for dataset image_folder")
    assert "space" not in line
