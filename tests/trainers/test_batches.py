"""Batching: the tensor and DataLoader paths train on the same batches."""
import pytest

from trainers import TrainSettings, train

pytestmark = pytest.mark.slow  # two real training runs


def test_tensor_and_dataloader_paths_see_the_same_batches():
    a = train(TrainSettings(epochs=2, seed=5, augment="flip_crop")).history
    b = train(TrainSettings(epochs=2, seed=5, augment="flip_crop", loader="dataloader",
                            num_workers=2)).history
    for ha, hb in zip(a, b):
        for key in ("train_loss", "train_acc", "val_loss", "val_acc"):
            assert ha[key] == pytest.approx(hb[key], rel=1e-6), key
