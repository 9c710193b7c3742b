"""equal_steps_batch_size (every batch size takes the steps per epoch of one batch size), and
noise_scale's steps (left as they are): the training order, and the settings' checks."""
import collections

import pytest
import torch

from trainers import SettingsError, TrainSettings
from trainers.batches import EpochOrder, make_batches
from trainers.datasets import load_data


def _steps(order: EpochOrder, epoch: int):
    order.set_epoch(epoch)
    return [(torch.cat(micro), samples) for micro, samples, _ in order.steps()]


def test_an_epoch_at_equal_steps_takes_the_reference_batch_sizes_steps_of_full_batches():
    order = EpochOrder(1437, 256, 1, seed=5, steps_batch_size=32)
    steps = _steps(order, 1)
    assert order.steps_per_epoch == len(steps) == 45  # ceil(1437 / 32), not ceil(1437 / 256)
    assert all(len(idx) == samples == 256 for idx, samples in steps)
    seen = collections.Counter(torch.cat([idx for idx, _ in steps]).tolist())
    # whole passes over the split, one after another: every item 8 times (11,520 = 8 x 1437
    # + 24), 24 of them a ninth
    assert sorted(collections.Counter(seen.values()).items()) == [(8, 1437 - 24), (9, 24)]
    assert [idx.tolist() for idx, _ in _steps(order, 1)] == [idx.tolist() for idx, _ in steps]
    assert not torch.equal(_steps(order, 2)[0][0], steps[0][0])  # another epoch, another order


def test_equal_steps_at_the_batch_size_itself_is_the_plain_order():
    plain = _steps(EpochOrder(1437, 32, 1, seed=5), 3)
    same = _steps(EpochOrder(1437, 32, 1, seed=5, steps_batch_size=32), 3)
    assert [(i.tolist(), n) for i, n in plain] == [(i.tolist(), n) for i, n in same]
    # a smaller batch than the reference takes fewer samples than a pass
    small = _steps(EpochOrder(1437, 16, 1, seed=5, steps_batch_size=32), 3)
    assert len(small) == 45 and sum(len(i) for i, _ in small) == 45 * 16


def test_noise_scale_leaves_the_steps_as_they_are():
    """It measures at the epoch's end (trainers.noise), not by cutting the steps."""
    settings = TrainSettings(batch_size=64, noise_scale=True)
    plain = TrainSettings(batch_size=64)
    data = load_data(settings)
    steps = next(make_batches(data, "train", settings, torch.device("cpu"),
                              torch.Generator()).epoch(1))
    whole = next(make_batches(data, "train", plain, torch.device("cpu"),
                              torch.Generator()).epoch(1))
    assert [len(y) for _, y in steps.micro_batches] == [64]
    assert torch.equal(steps.micro_batches[0][1], whole.micro_batches[0][1])


@pytest.mark.parametrize("values, field", [
    ({"equal_steps_batch_size": 0}, "equal_steps_batch_size"),
])
def test_settings_refuse_what_the_order_cannot_do(values, field):
    with pytest.raises(SettingsError) as e:
        TrainSettings(**values)
    assert e.value.field == field
