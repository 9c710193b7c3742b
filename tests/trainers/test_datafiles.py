"""The data-file checks before a run: missing files fail with one clear line, downloads opt in."""
import pytest

from tests.datasets import write_mnist
from trainers import (
    DataError,
    TrainSettings,
    check_data_files,
    pending_download,
    train,
)


@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_torchvision_datasets_without_files_fail_with_one_clear_line(tmp_path, dataset):
    s = TrainSettings(dataset=dataset, data_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        check_data_files(s)
    message = str(e.value)
    assert str(tmp_path) in message and "download: true" in message and "\n" not in message
    with pytest.raises(DataError):  # the trainer refuses the same way
        train(s)
    assert not any(tmp_path.iterdir())  # nothing fetched, nothing half-written


@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_download_is_opt_in_and_skips_the_file_check(tmp_path, dataset):
    without = TrainSettings(dataset=dataset, data_dir=str(tmp_path))
    with pytest.raises(DataError, match="download: true"):
        check_data_files(without)
    # the same empty folder passes once download is set, and the check itself fetches nothing
    assert check_data_files(TrainSettings(dataset=dataset, data_dir=str(tmp_path),
                                          download=True)) is None
    assert not any(tmp_path.iterdir())


def test_mnist_files_on_disk_pass_without_download_and_a_missing_one_is_named(tmp_path):
    write_mnist(tmp_path)
    s = TrainSettings(dataset="mnist", data_dir=str(tmp_path))
    assert check_data_files(s) is None
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match=r"missing t10k-labels-idx1-ubyte\)"):
        check_data_files(s)


def test_a_download_is_announced_until_the_files_are_there(tmp_path):
    s = TrainSettings(dataset="mnist", data_dir=str(tmp_path), download=True)
    assert pending_download(s) == f"mnist (12 MB) into {tmp_path}"
    assert pending_download(TrainSettings(dataset="mnist", data_dir=str(tmp_path))) is None
    write_mnist(tmp_path)
    assert pending_download(s) is None


def test_an_image_folder_needs_its_splits_and_a_size(tmp_path):
    with pytest.raises(DataError, match="train/"):
        check_data_files(TrainSettings(dataset="image_folder", data_dir=str(tmp_path),
                                       image_size=8))
    # without image_size the images' own size, when they share one (trainers.datasets)
    assert TrainSettings(dataset="image_folder", data_dir=str(tmp_path)).image_size is None
