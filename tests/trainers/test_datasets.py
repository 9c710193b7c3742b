"""Every dataset kind loads with int64 labels and normalised float32 images, and trains."""
import numpy as np
import pytest
import torch

from tests.datasets import tensor_dataset, write_image_folder, write_mnist
from trainers import DataError, TrainSettings, evaluate_test, train
from trainers.datasets import STATS, carve_validation, load_data, raw_to_tensors


def _one_epoch(**settings):
    result = train(TrainSettings(epochs=1, **settings))
    metrics = result.history[0]
    assert np.isfinite(metrics["train_loss"]) and 0 <= metrics["val_acc"] <= 1
    return result


def test_fake_data_trains_one_epoch():
    data = load_data(TrainSettings(dataset="fake", image_size=16))
    x, y = data.train.tensors
    assert x.shape == (1024, 3, 16, 16) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert data.test is not None and data.num_classes == 10
    _one_epoch(dataset="fake", image_size=16, batch_size=128)


@pytest.mark.parametrize("folder,dataset", [("MNIST", "mnist"),
                                            ("FashionMNIST", "fashion_mnist")])
def test_mnist_layouts_load_from_idx_files(tmp_path, folder, dataset):
    write_mnist(tmp_path, folder, n_train=200, n_test=60)
    s = TrainSettings(dataset=dataset, data_dir=str(tmp_path), val_fraction=0.25)
    data = load_data(s)
    x_train, y_train = data.train.tensors
    x_val, _ = data.val.tensors
    assert (len(x_train), len(x_val), len(data.test)) == (150, 50, 60)
    assert x_train.shape[1:] == (1, 28, 28) and y_train.dtype == torch.int64
    norm = STATS[dataset]
    assert float(x_train.max()) == pytest.approx((1.0 - norm.mean[0]) / norm.std[0])
    result = _one_epoch(dataset=dataset, data_dir=str(tmp_path), val_fraction=0.25, lr=3e-3,
                        batch_size=16)
    assert result.history[0]["val_acc"] > 0.5  # the class band is easy to see


def test_validation_is_carved_the_same_way_for_every_trial():
    x = torch.arange(100.0).view(100, 1, 1, 1)
    y = torch.arange(100)
    (xt, yt), (xv, yv) = carve_validation(x, y, 0.1)
    (_, yt2), (_, yv2) = carve_validation(x, y, 0.1)
    assert len(yv) == 10 and len(yt) == 90
    assert torch.equal(yv, yv2) and torch.equal(yt, yt2)
    assert not set(yv.tolist()) & set(yt.tolist())


def test_cifar_arrays_become_normalised_nchw_tensors():
    raw = np.zeros((2, 32, 32, 3), dtype=np.uint8)  # CIFAR's on-disk layout: N x H x W x C
    raw[0, :, :, 0] = 255
    x, y = raw_to_tensors(raw, [3, 7], STATS["cifar10"])
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    mean, std = STATS["cifar10"].mean, STATS["cifar10"].std
    assert float(x[0, 0, 0, 0]) == pytest.approx((1 - mean[0]) / std[0])
    assert float(x[1, 2, 5, 5]) == pytest.approx(-mean[2] / std[2])


def test_an_image_folder_of_mixed_sizes_and_modes_trains(tmp_path):
    write_image_folder(tmp_path, splits=("train", "val", "test"))
    s = TrainSettings(dataset="image_folder", data_dir=str(tmp_path), image_size=16,
                      batch_size=4, num_workers=2)
    data = load_data(s)
    assert data.classes == ("cat", "dog") and data.in_channels == 3 and not data.in_memory
    image, label = data.train[0]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32
    result = _one_epoch(dataset="image_folder", data_dir=str(tmp_path), image_size=16,
                        batch_size=4, num_workers=2)
    weights = tmp_path / "w.pt"
    from trainers import save_weights

    save_weights(result.model, weights)
    test = evaluate_test(s, weights)
    assert set(test) == {"test_loss", "test_acc"} and 0 <= test["test_acc"] <= 1


def test_an_image_folder_can_be_materialised_as_tensors(tmp_path):
    write_image_folder(tmp_path)
    loader = _one_epoch(dataset="image_folder", data_dir=str(tmp_path), image_size=8,
                        batch_size=4, num_workers=0, loader="dataloader")
    tensors = _one_epoch(dataset="image_folder", data_dir=str(tmp_path), image_size=8,
                         batch_size=4, num_workers=0, loader="tensors")
    assert loader.history[0]["train_loss"] == pytest.approx(tensors.history[0]["train_loss"])


def test_image_folders_need_matching_classes(tmp_path):
    write_image_folder(tmp_path)
    (tmp_path / "val" / "dog").rename(tmp_path / "val" / "wolf")
    with pytest.raises(DataError, match="same class folders"):
        load_data(TrainSettings(dataset="image_folder", data_dir=str(tmp_path), image_size=8))


def test_a_user_dataset_function_trains_on_its_splits():
    """The user's training split trains and its validation split scores: the epoch's val_loss
    and val_acc are the trained model's, recomputed here on the function's own val tensors."""
    train_set, val_set, num_classes = tensor_dataset()
    result = _one_epoch(dataset="tests.datasets:tensor_dataset", model="mlp", batch_size=16)
    assert result.val_items == len(val_set) == 32
    model = result.model.eval()
    x, y = val_set.tensors
    with torch.no_grad():
        logits = model(x).float()
    metrics = result.history[0]
    assert metrics["val_acc"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert metrics["val_loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)),
                                                rel=1e-5)
    assert logits.shape[1] == num_classes
    data = load_data(TrainSettings(dataset="tests.datasets:tensor_dataset", model="mlp"))
    assert torch.equal(data.train.tensors[0], train_set.tensors[0])
    assert (data.num_classes, data.in_channels, data.image_size) == (4, 3, (12, 12))
    assert evaluate_test(TrainSettings(dataset="tests.datasets:tensor_dataset", model="mlp"),
                         "unused") is None  # no test split: nothing to evaluate


def test_float_labels_from_a_user_dataset_are_refused():
    with pytest.raises(DataError, match="labels are torch.float32"):
        train(TrainSettings(dataset="tests.datasets:float_label_dataset", model="mlp",
                            epochs=1, num_workers=0))


def test_a_missing_user_dataset_names_the_setting():
    with pytest.raises(DataError, match="cannot be imported"):
        load_data(TrainSettings(dataset="tests.datasets:nothing_here"))
    with pytest.raises(DataError, match=r"^dataset cannot be imported: its module raised "
                                        r"RuntimeError: boom at import"):
        load_data(TrainSettings(dataset="tests.datasets_raising:make"))


def test_a_user_dataset_that_streams_is_refused_naming_map_style():
    with pytest.raises(DataError, match="must be a map-style dataset"):
        load_data(TrainSettings(dataset="tests.corpus:stream"))


def _one_size_folder(root, per_class: int):
    from tests.corpus import write_one_size_folder

    write_one_size_folder(root, per_class)
    return sorted(str(p) for p in root.rglob("*.png"))


def test_an_image_folder_reads_a_bounded_sample_of_headers_for_its_size(tmp_path, monkeypatch):
    from PIL import Image

    from trainers import datasets

    files = _one_size_folder(tmp_path, per_class=40)  # 160 images of 10 x 12
    opened = []
    real_open = Image.open

    def counting_open(fp, *args, **kwargs):
        opened.append(fp)
        return real_open(fp, *args, **kwargs)

    monkeypatch.setattr(Image, "open", counting_open)
    data = load_data(TrainSettings(dataset="image_folder", data_dir=str(tmp_path)))
    assert data.image_size == (10, 12)
    assert len(files) == 160 and len(opened) == datasets.SIZE_SAMPLE
    assert {files[0], files[-1]} <= set(opened)  # spread over the whole list, ends included


def test_an_image_of_another_size_outside_the_sample_fails_when_read(tmp_path, monkeypatch):
    from PIL import Image

    from trainers import datasets

    _one_size_folder(tmp_path, per_class=4)
    odd = tmp_path / "train" / "cat" / "2.png"  # not among 2 headers spread over 16 files
    Image.new("RGB", (7, 5)).save(odd)
    monkeypatch.setattr(datasets, "SIZE_SAMPLE", 2)
    data = load_data(TrainSettings(dataset="image_folder", data_dir=str(tmp_path)))
    assert data.image_size == (10, 12)
    index = [p for p, _ in data.train.samples].index(str(odd))
    with pytest.raises(DataError, match=r"image_size is needed: .*2\.png is 5x7, others are "
                                        r"10x12"):
        data.train[index]


def _corrupt(root, kind: str):
    """One file of the folder as garbage bytes, or a PNG cut short (its header still reads)."""
    path = root / "train" / "dog" / "3.png"
    data = path.read_bytes()
    path.write_bytes(b"not an image at all" * 4 if kind == "garbage" else data[:len(data) // 2])
    return path


def test_a_file_that_is_not_an_image_is_a_data_error_naming_it(tmp_path):
    _one_size_folder(tmp_path, per_class=4)
    bad = _corrupt(tmp_path, "garbage")
    with pytest.raises(DataError, match="not an image PIL can read") as caught:
        load_data(TrainSettings(dataset="image_folder", data_dir=str(tmp_path)))
    assert str(bad) in str(caught.value) and "delete or replace it" in str(caught.value)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_truncated_image_is_a_data_error_naming_it_in_training(tmp_path, num_workers):
    _one_size_folder(tmp_path, per_class=4)
    bad = _corrupt(tmp_path, "truncated")
    with pytest.raises(DataError, match="(?i)truncated") as caught:  # image_size: no header
        train(TrainSettings(dataset="image_folder", data_dir=str(tmp_path), epochs=1,  # read
                            image_size=8, batch_size=8, num_workers=num_workers,
                            loader="dataloader"))
    message = str(caught.value)
    # one line, from a DataLoader worker too: the file and the fix, not the worker's traceback
    assert str(bad) in message and "delete or replace it" in message
    assert len(message.splitlines()) == 1


def test_validation_split_names_the_digits_items_the_trainer_validates_on():
    """trainers.validation_split rebuilds the 360 validation items of digits (indices into
    sklearn's load_digits) without loading the data: the same pixels and labels, in order."""
    from sklearn.datasets import load_digits

    import trainers
    from trainers.datasets import load_data

    s = trainers.TrainSettings(dataset="digits")
    split = trainers.validation_split(s)
    items = list(split.indices)
    assert len(items) == len(set(items)) == 360 and split.to_dict()["items"] == 360
    digits = load_digits()
    x, y = load_data(s).val.tensors
    assert torch.equal(torch.tensor(digits.images[items] / 16.0, dtype=torch.float32), x[:, 0])
    assert torch.equal(torch.tensor(digits.target[items]), y)


@pytest.mark.parametrize("dataset, n", [("mnist", 60000), ("cifar10", 50000)])
def test_validation_split_of_a_carved_dataset_is_the_carving_of_its_training_split(dataset, n):
    import trainers
    from trainers.datasets import carve_validation

    fraction = 0.1
    split = trainers.validation_split(trainers.TrainSettings(dataset=dataset,
                                                             val_fraction=fraction))
    index = torch.arange(n)
    _, (val_x, _) = carve_validation(index, index, fraction)
    assert list(split.indices) == val_x.tolist()


def test_a_dataset_whose_validation_split_is_its_own_has_none_to_rebuild():
    import trainers

    assert trainers.validation_split(trainers.TrainSettings(dataset="fake")) is None
