"""Preflight: each classic bug, planted in a small model or dataset, is caught by its check."""
import json

import pytest

from trainers import TrainSettings, train
from trainers.preflight import ERROR, FAIL, PASS, SKIP, WARN, preflight


def run(tmp_path=None, **settings):
    return preflight(TrainSettings(**settings), out_dir=tmp_path, overfit_steps=300)


def test_the_healthy_default_passes_every_check_and_leaves_its_evidence(tmp_path):
    report = preflight(TrainSettings(), out_dir=tmp_path, lr_range_test=True,
                       lr_search=(1e-4, 1e-1))
    assert [(c.name, c.status) for c in report.checks if c.status != PASS] == []
    assert len(report.checks) == 11
    assert report.status == PASS
    assert (tmp_path / "samples.png").stat().st_size > 1000
    assert (tmp_path / "lr_range.png").stat().st_size > 1000
    low, high = report.suggested_lr
    assert 1e-6 <= low < high <= 1.0
    assert "1437 training and 360 validation items" in report.check("data").evidence
    assert "model cpu float32 | inputs cpu float32 | labels cpu int64" == \
        report.check("devices").evidence
    json.dumps(report.to_dict())  # what the orchestrator logs


def test_float_labels_fail_the_labels_check_and_stop_the_training_checks():
    report = run(dataset="tests.datasets:float_label_dataset")
    labels = report.check("labels")
    assert labels.status == FAIL and "float32" in labels.evidence
    assert "torch.long" in labels.fix
    assert report.check("overfit").status == SKIP
    assert report.status == FAIL


def test_labels_out_of_range_fail_naming_the_range():
    labels = run(dataset="tests.datasets:one_based_label_dataset").check("labels")
    assert labels.status == FAIL
    assert "values 1..4, num_classes 4" in labels.evidence
    assert "outside [0, 4)" in labels.cause


def test_uint8_pixels_reaching_the_model_fail_the_inputs_check():
    inputs = run(dataset="tests.datasets:uint8_image_dataset").check("inputs")
    assert inputs.status == FAIL
    assert "torch.uint8" in inputs.evidence and "normalise" in inputs.fix


def test_layers_in_a_plain_list_fail_registration():
    report = run(model="tests.datasets:plain_list_model")
    check = report.check("registration")
    assert check.status == FAIL
    assert check.evidence.startswith("layers (a plain list of 2 module(s)")
    assert "nn.ModuleList" in check.fix


def test_a_softmax_before_cross_entropy_fails_the_loss_wiring():
    report = run(model="tests.datasets:softmax_model")
    check = report.check("loss_wiring")
    assert check.status == FAIL and "softmax" in check.cause
    assert report.check("overfit").status in (WARN, FAIL)  # it also cannot memorise a batch


def test_a_detached_output_fails_the_gradient_check():
    check = run(model="tests.datasets:detached_model").check("gradients")
    assert check.status == FAIL and "detached" in check.cause


def test_labels_drawn_again_on_every_access_make_one_batch_impossible_to_overfit():
    report = run(dataset="tests.datasets:random_label_dataset", num_workers=0)
    assert report.check("labels").status == WARN
    overfit = report.check("overfit")
    assert overfit.status == FAIL
    assert "labels changed between two reads" in overfit.cause


def test_random_labels_drawn_once_are_memorised_so_they_pass():
    report = run(dataset="tests.datasets:fixed_random_label_dataset")
    assert report.check("overfit").status == PASS
    assert report.check("labels").status == PASS


def test_an_lr_search_range_that_misses_the_learning_range_is_flagged():
    report = preflight(TrainSettings(), lr_range_test=True, lr_search=(1e-9, 1e-8),
                       overfit_steps=5)
    check = report.check("lr_range")
    assert check.status == WARN and "search lr in [" in check.fix


@pytest.mark.parametrize("value", [0, -1])
def test_overfit_steps_must_be_positive(value):
    with pytest.raises(ValueError, match="overfit_steps"):
        preflight(TrainSettings(), overfit_steps=value)


CORPUS = {"dataset": "tests.corpus:numpy_images", "batch_size": 16}


def test_a_check_that_raises_is_an_error_row_and_the_other_checks_still_run(tmp_path):
    (tmp_path / "samples.png").mkdir()  # the sample grid cannot be written: the checker's fault
    report = preflight(TrainSettings(**CORPUS, model="tests.corpus:pooled"), out_dir=tmp_path,
                       overfit_steps=50)
    (error,) = [c for c in report.checks if c.status == ERROR]
    assert error.name == "samples" and error.evidence.startswith("IsADirectoryError: ")
    assert "not a verdict on your code" in error.cause
    verdicts = {c.name: c.status for c in report.checks if c.status != ERROR}
    assert len(verdicts) == 10 and set(verdicts.values()) <= {PASS, WARN}
    assert report.status == ERROR  # worse than WARN, short of a FAIL


def test_an_exception_from_the_users_code_inside_a_check_is_a_fail_not_an_error(tmp_path):
    report = preflight(TrainSettings(**CORPUS, model="tests.corpus:raises_in_backward"),
                       out_dir=tmp_path, overfit_steps=5)
    assert not [c for c in report.checks if c.status == ERROR]
    (fail,) = [c for c in report.checks if c.status == FAIL]
    assert "a bug in the user's backward" in fail.evidence and "corpus.py" in fail.evidence
    assert fail.cause == "your code raised" and report.status == FAIL


def test_lazy_layers_are_initialised_before_the_checks_and_the_optimizer():
    settings = TrainSettings(**CORPUS, model="tests.corpus:lazy", epochs=1)
    report = preflight(settings, overfit_steps=50)
    assert report.check("registration").evidence == "2276 parameters, all registered"
    assert report.check("gradients").evidence == "all 4 parameter tensors got a gradient"
    assert report.status in (PASS, WARN)
    first, again = train(settings), train(settings)  # the pass does not disturb the seeding
    curve = ("train_loss", "grad_norm", "val_loss", "val_acc")
    assert len(first.history) == 1
    assert [first.history[0][k] for k in curve] == [again.history[0][k] for k in curve]
    assert sum(p.numel() for p in first.model.parameters()) == 2276


def test_float_labels_fail_without_breaking_the_sample_grid(tmp_path):
    report = preflight(TrainSettings(dataset="tests.datasets:float_label_dataset"),
                       out_dir=tmp_path, overfit_steps=5)
    assert report.check("labels").status == FAIL
    assert [c.name for c in report.checks if c.status == ERROR] == []
    assert (tmp_path / "samples.png").is_file()  # the images, without their unusable labels


def test_one_hot_labels_fail_naming_the_class_index_fix():
    report = run(dataset="tests.corpus:one_hot")
    labels = report.check("labels")
    assert labels.status == FAIL and "(48, 4)" in labels.evidence
    assert "one-hot" in labels.cause and "argmax" in labels.fix
    assert [c.name for c in report.checks if c.status == ERROR] == []


def test_a_model_returning_logits_and_aux_fails_naming_the_fix():
    check = run(**CORPUS, model="tests.corpus:logits_and_aux").check("gradients")
    assert check.status == FAIL and "returned a tuple" in check.evidence
    assert "return the logits alone" in check.fix
    check = run(**CORPUS, model="tests.corpus:aux_in_eval").check("loss_wiring")
    assert check.status == FAIL and "in eval mode the model returned a tuple" in check.evidence


def test_a_last_batch_of_one_item_that_batchnorm_cannot_train_fails_naming_batch_size():
    def checks(batch_size):  # the overfit run does not matter here: 5 steps
        return preflight(TrainSettings(dataset="tests.corpus:tiny", batch_size=batch_size,
                                       model="tests.corpus:batchnorm_head"), overfit_steps=5)

    check = checks(3).check("last_batch")  # 10 items = 3 + 3 + 3 + 1
    assert check.status == FAIL and "leaves a forward pass of one item" in check.evidence
    assert "BatchNorm" in check.cause and "batch_size that leaves no single item (e.g. 4)" \
        in check.fix
    assert "last_batch" not in {c.name for c in checks(5).checks}


def test_the_last_batch_suggestion_counts_the_forward_passes_of_gradient_accumulation():
    def checks(batch_size):
        return preflight(TrainSettings(dataset="tests.corpus:tiny", batch_size=batch_size,
                                       grad_accum_steps=2, model="tests.corpus:batchnorm_head"),
                         overfit_steps=5)

    # by hand, 10 items, 2 forward passes per batch: 4 leaves 10 = 4 + 4 + 2, the last 2 in
    # passes of 1 + 1; 5 is no multiple of 2 (refused); 6 leaves 6 + 4, passes of 3 + 3, 2 + 2
    check = checks(4).check("last_batch")
    assert check.status == FAIL and "(each in 2 forward passes)" in check.evidence
    assert "batch_size that leaves no single item (e.g. 6)" in check.fix
    assert "last_batch" not in {c.name for c in checks(6).checks}


def test_the_sample_grid_shows_each_image_upscaled_with_its_class_name(tmp_path):
    from types import SimpleNamespace

    import numpy as np
    import torch
    from PIL import Image

    from trainers.preflight import GRID_COLUMNS, GRID_TILE, sample_grid

    # two 2x2 grey images, min-max scaled: a chessboard and its negative
    x = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]], [[[1.0, 0.0], [0.0, 1.0]]]])
    data = SimpleNamespace(normalization=None, classes=("cat", "dog"))
    png = np.asarray(Image.open(sample_grid(x, torch.tensor([1, 0]), data,
                                             tmp_path / "g.png")).convert("L"))
    assert png.shape == (GRID_TILE + 22, GRID_COLUMNS * (GRID_TILE + 8))
    half = GRID_TILE // 2
    first = png[2:2 + GRID_TILE, 4:4 + GRID_TILE]  # tile 0, pasted at (4, 2)
    assert (first[:half, :half] == 0).all() and (first[:half, half:] == 255).all()
    second = png[2:2 + GRID_TILE, 4 + GRID_TILE + 8:4 + 2 * GRID_TILE + 8]
    assert (second[:half, :half] == 255).all() and (second[half:, :half] == 0).all()
    caption = png[2 + GRID_TILE + 3:, 4:4 + GRID_TILE]
    assert (caption < 128).any()  # the class name is written under the tile
