"""The trainer's seams with user code: an optimizer (Lion, written here), torch:NAME, a schedule,
a loss, a step (mixup) and validation metrics, each run for real and checked by hand."""
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.helpers import lrs, scheduler_lrs
from trainers import SettingsError, TrainSettings, train
from trainers.optim import build_loss, build_optimizer, lr_at
from trainers.preflight import preflight

HERE = __name__  # this module, as its module:function names need it
CALLS = {"loss": 0, "step": 0, "loss_settings": None}


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled weight decay."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(torch.sign(beta1 * m + (1 - beta1) * p.grad), alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def lion(params, settings, beta1=0.9, beta2=0.99):
    return Lion(params, betas=(beta1, beta2))


class Frozen(torch.optim.Optimizer):
    """An optimizer whose step forgets to update anything."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        pass


def frozen(params, settings):
    return Frozen(params)


def focal(settings, gamma=2.0):
    """Focal loss: cross-entropy weighted by (1 - p_true) ** gamma."""
    CALLS["loss_settings"] = settings

    def loss(logits, targets):
        CALLS["loss"] += 1
        logp = torch.log_softmax(logits.float(), 1).gather(1, targets[:, None])[:, 0]
        return (-(1 - logp.exp()) ** gamma * logp).mean()
    return loss


def mixup(model, inputs, targets, loss_fn, settings, alpha=0.4):
    """Mixup: a convex mix of the batch with a shuffled copy, the loss mixed the same way."""
    CALLS["step"] += 1
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    order = torch.randperm(len(inputs))
    logits = model(lam * inputs + (1 - lam) * inputs[order])
    return lam * loss_fn(logits, targets) + (1 - lam) * loss_fn(logits, targets[order]), None


def top2(logits, targets):
    return {"val_top2": (logits.topk(2, 1).indices == targets[:, None]).any(1).float().mean()}


def percent(logits, targets):  # a name MLflow refuses (its characters)
    return {"acc@top5%": 0.5}


def long_name(logits, targets):  # a name MLflow refuses (past its 250 characters)
    return {"a" * 300: 0.5}


def halved_after(step, total_steps, warmup_steps, at=0.5, factor=0.5):
    return 1.0 if step < at * total_steps else factor


def negative(step, total_steps, warmup_steps):
    return -1.0


def test_lion_steps_follow_lions_formula_with_decay_per_group():
    model = nn.Linear(3, 2)
    s = TrainSettings(optimizer=f"{HERE}:lion", lr=0.01, weight_decay=0.1,
                      optimizer_args={"beta1": 0.8, "beta2": 0.95})
    opt = build_optimizer(model, s)
    assert isinstance(opt, Lion) and opt.param_groups[0]["betas"] == (0.8, 0.95)
    assert [(g["lr"], g["weight_decay"]) for g in opt.param_groups] == [(0.01, 0.1), (0.01, 0.0)]
    w, b = model.weight.detach().clone(), model.bias.detach().clone()
    g1, g2 = torch.randn(2, 3), torch.randn(2, 3)
    gb1, gb2 = torch.randn(2), torch.randn(2)
    for gw, gb in ((g1, gb1), (g2, gb2)):
        model.weight.grad, model.bias.grad = gw.clone(), gb.clone()
        opt.step()
    # by hand: two steps, momentum m1 = (1 - beta2) g1; the weight decays, the bias does not
    w1 = w * (1 - 0.01 * 0.1) - 0.01 * torch.sign(0.2 * g1)
    w2 = w1 * (1 - 0.01 * 0.1) - 0.01 * torch.sign(0.8 * 0.05 * g1 + 0.2 * g2)
    b2 = b - 0.01 * torch.sign(0.2 * gb1) - 0.01 * torch.sign(0.8 * 0.05 * gb1 + 0.2 * gb2)
    assert torch.allclose(model.weight, w2, atol=1e-7)
    assert torch.allclose(model.bias, b2, atol=1e-7)


def test_torch_radam_by_name_updates_as_torch_optim_radam():
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    theirs = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    theirs.load_state_dict(ours.state_dict())
    s = TrainSettings(optimizer="torch:RAdam", lr=0.01, weight_decay=0.05,
                      optimizer_args={"betas": (0.8, 0.9), "eps": 1e-6})
    opt = build_optimizer(ours, s)
    ref = torch.optim.RAdam([{"params": [theirs[0].weight], "weight_decay": 0.05},
                             {"params": [theirs[0].bias, theirs[1].weight, theirs[1].bias],
                              "weight_decay": 0.0}], lr=0.01, betas=(0.8, 0.9), eps=1e-6)
    assert type(opt) is torch.optim.RAdam
    for _ in range(8):  # past RAdam's first steps, where its rectification switches on
        grads = [torch.randn_like(p) for p in ours.parameters()]
        for model, o in ((ours, opt), (theirs, ref)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            o.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


def test_a_user_optimizer_loss_step_schedule_and_metric_train_together_for_real():
    """Lion, a focal loss, mixup and a user schedule in one real training; the extra metric
    is what the returned model gives by hand."""
    CALLS.update(loss=0, step=0)
    s = TrainSettings(epochs=2, lr=1e-3, batch_size=128, model="mlp",
                      optimizer=f"{HERE}:lion", loss=f"{HERE}:focal",
                      loss_args={"gamma": 1.0}, step=f"{HERE}:mixup", step_args={"alpha": 0.3},
                      schedule=f"{HERE}:halved_after", schedule_args={"at": 0.5},
                      metrics=[f"{HERE}:top2"])
    reports = []
    result = train(s, on_epoch_end=reports.append)
    first, last = result.history
    assert last["train_loss"] < first["train_loss"] and last["val_acc"] > 0.5
    assert math.isnan(first["train_acc"])  # the step returned no logits to score
    assert CALLS["step"] == 2 * 12 and CALLS["loss"] == 2 * 2 * 12  # 12 steps an epoch
    assert CALLS["loss_settings"] == s
    lrs = [lr for r in reports for _, lr in r.lr_steps]
    assert lrs == pytest.approx([1e-3] * 12 + [5e-4] * 12)
    from trainers.datasets import load_data

    device = next(result.model.parameters()).device
    x, y = (t.to(device) for t in load_data(s).val.tensors)
    with torch.no_grad():
        logits = result.model.eval()(x)
    assert last["val_top2"] == pytest.approx(float(top2(logits, y)["val_top2"]), abs=1e-6)
    assert last["val_acc"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))


def test_default_loss_is_cross_entropy_with_label_smoothing():
    logits, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 3, 0])
    loss = build_loss(TrainSettings(label_smoothing=0.2))(logits, y)
    smooth = 0.8 * F.one_hot(y, 4) + 0.2 / 4
    assert float(loss) == pytest.approx(float(-(smooth * logits.log_softmax(1)).sum(1).mean()))


def test_warmup_linear_rises_then_falls_in_a_straight_line_to_min_lr():
    s = TrainSettings(lr=0.1, epochs=3, warmup_epochs=1, min_lr=0.01, schedule="warmup_linear")
    expected = [0.1 * (i + 1) / 5 for i in range(5)] + \
        [0.01 + 0.09 * (1 - j / 10) for j in range(10)]
    assert lrs(s, 5) == pytest.approx(expected)


def test_step_drops_by_gamma_every_step_size_epochs():
    s = TrainSettings(lr=0.1, epochs=5, schedule="step", step_size_epochs=2, gamma=0.5)
    assert lrs(s, 3) == pytest.approx([0.1] * 6 + [0.05] * 6 + [0.025] * 3)


def test_onecycle_matches_its_two_cosines_and_torchs_onecycle():
    s = TrainSettings(lr=0.2, epochs=4, schedule="onecycle", pct_start=0.25, div_factor=10,
                      final_div_factor=100)
    total, peak = 40, 0.25 * 40 - 1

    def by_hand(i):
        if i <= peak:
            a, b, t = 0.02, 0.2, i / peak
        else:
            a, b, t = 0.2, 0.02 / 100, (i - peak) / (total - 1 - peak)
        return b + (a - b) * (1 + math.cos(math.pi * t)) / 2

    ours = lrs(s, 10)
    assert ours == pytest.approx([by_hand(i) for i in range(total)])
    assert ours[0] == pytest.approx(0.02) and ours[9] == pytest.approx(0.2)
    assert ours[-1] == pytest.approx(0.0002)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.2)
    theirs = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=total,
                                                 pct_start=0.25, div_factor=10,
                                                 final_div_factor=100)
    seen = []
    for _ in range(total):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        theirs.step()
    assert ours == pytest.approx(seen)


def test_warmup_stable_decay_holds_then_falls_to_min_lr_at_the_last_step():
    s = TrainSettings(lr=0.1, epochs=10, warmup_epochs=1, min_lr=0.02,
                      schedule="warmup_stable_decay", decay_fraction=0.3)
    got = lrs(s, 2)  # 20 steps: 2 of warmup, 12 held, the last 6 decaying
    assert got[:2] == pytest.approx([0.05, 0.1])
    assert got[2:14] == pytest.approx([0.1] * 12)
    assert got[14:] == pytest.approx([0.1 - 0.08 * k / 6 for k in range(1, 7)])


def test_a_user_schedule_multiplies_the_lr_and_drives_the_optimizer():
    s = TrainSettings(lr=0.1, epochs=2, optimizer="sgd", schedule=f"{HERE}:halved_after",
                      schedule_args={"at": 0.25, "factor": 0.1})
    assert lrs(s, 4) == pytest.approx([0.1] * 2 + [0.01] * 6)
    assert scheduler_lrs(s, 4) == pytest.approx(lrs(s, 4))


def test_a_user_schedule_returning_a_negative_multiplier_is_refused():
    with pytest.raises(SettingsError, match=r"returned -1.0 at step 0; it must return a float"):
        lr_at(TrainSettings(schedule=f"{HERE}:negative"), 0, 10)


def float32_multiplier(step, total_steps, warmup_steps):
    import numpy as np

    return np.float32(0.5)


def test_a_user_schedule_may_return_any_real_number_a_numpy_scalar_too():
    s = TrainSettings(lr=0.1, epochs=1, schedule=f"{HERE}:float32_multiplier")
    assert lr_at(s, 0, 10) == pytest.approx(0.05)
    assert isinstance(lr_at(s, 3, 10), float)


@pytest.mark.parametrize("name", ["torch:Optimizer", "torch:lr_scheduler", "torch:Adam_"])
def test_a_torch_name_that_is_no_optimizer_class_is_refused_naming_the_choices(name):
    """torch.optim.Optimizer is the abstract base: it asked for optimizer_args (defaults)."""
    from trainers import check_seams

    with pytest.raises(SettingsError, match=f"^optimizer is not a torch.optim optimizer; "
                                            f"torch: takes ASGD, .*RAdam.*, got '{name}'$"):
        check_seams(TrainSettings(optimizer=name))


def test_unknown_keywords_of_user_code_are_refused_by_signature():
    from trainers import check_seams

    with pytest.raises(SettingsError, match=r"optimizer_args.beta3 is not a keyword of "
                                            r"optimizer .*:lion \(it takes beta1, beta2\)"):
        check_seams(TrainSettings(optimizer=f"{HERE}:lion", optimizer_args={"beta3": 0.9}))
    with pytest.raises(SettingsError, match=r"optimizer_args.lr is set by the trainer"):
        check_seams(TrainSettings(optimizer="torch:RAdam", optimizer_args={"lr": 0.1}))
    with pytest.raises(SettingsError, match="takes ASGD, .*RAdam"):
        check_seams(TrainSettings(optimizer="torch:Radam"))
    with pytest.raises(SettingsError, match="weight_decay must be 0 with optimizer torch:Rprop"):
        check_seams(TrainSettings(optimizer="torch:Rprop", weight_decay=0.1))


def test_preflight_fails_an_optimizer_that_does_not_update_the_weights():
    report = preflight(TrainSettings(optimizer=f"{HERE}:frozen"), overfit_steps=5)
    check = report.check("seams")
    assert report.status == "FAIL" and check.status == "FAIL"
    assert "changed 0 of 8 parameter tensors" in check.evidence
    assert "optimizer leaves the weights as they were" in check.cause
    assert report.check("overfit").status == "SKIP"
    passing = preflight(TrainSettings(optimizer=f"{HERE}:lion"), overfit_steps=5)
    assert passing.check("seams").status == "PASS"
    assert "changed 8 of 8 parameter tensors" in passing.check("seams").evidence


@pytest.mark.parametrize("name,why", [
    ("val_acc", "logs itself"), ("lr", "logs itself"), ("peak_memory_mb", "logs itself"),
    ("train_seconds", "logs itself"), ("test_acc", "logs itself"), ("export_onnx_x", "logs itself"),
    ("system/cpu_percent", "logs itself"), ("val_top2", "twice"), ("", "not a name")])
def test_a_user_metric_may_not_take_a_name_the_run_logs_or_another_function_returns(name, why):
    """Its values would be mixed into another curve of the run (lr per step, system/* per
    sample, test_* of the test split) or overwrite another function's."""
    from trainers.loop import user_metrics

    logits, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    fns = {f"{HERE}:top2": top2, "other:f": lambda lg, t: {name: 0.5}}
    with pytest.raises(SettingsError, match=f"^metrics returned the name {name!r}.*{why}"):
        user_metrics(fns, logits, y, {"val_loss", "val_acc"})
    fine = user_metrics({**fns, "other:f": lambda lg, t: {"val_top3": 0.5}}, logits, y, set())
    assert fine == {"val_top2": pytest.approx(float(top2(logits, y)["val_top2"])),
                    "val_top3": 0.5}


# ------------------------------------ a user function's signature decides its <seam>_args

def needs_at(step, total_steps, warmup_steps, at, factor=0.5):
    return 1.0 if step < at * total_steps else factor


def any_keywords(step, total_steps, warmup_steps, **kwargs):
    return 1.0


def keyword_only(step, total_steps, warmup_steps, *, at=0.5):
    return 1.0 if step < at * total_steps else 0.5


def two_of_three(step, total_steps):
    return 1.0


def star_args(*args, at=0.5):
    step, total_steps, _ = args
    return 1.0 if step < at * total_steps else 0.5


def star_args_needs_at(*args, at):
    return 1.0


def test_a_user_function_that_takes_no_keywords_refuses_every_keyword():
    from trainers import check_seams

    check_seams(TrainSettings(schedule=f"{HERE}:negative"))  # none given: fine
    with pytest.raises(SettingsError, match=rf"^schedule_args.at is not a keyword of schedule "
                                            rf"{HERE}:negative \(it takes none\): remove it, "
                                            rf"got 0.5$"):
        check_seams(TrainSettings(schedule=f"{HERE}:negative", schedule_args={"at": 0.5}))


def test_a_keyword_without_a_default_must_be_given():
    from trainers import check_seams

    with pytest.raises(SettingsError, match=rf"^schedule_args lack at, which schedule "
                                            rf"{HERE}:needs_at needs \(it has no default\)"):
        check_seams(TrainSettings(schedule=f"{HERE}:needs_at"))
    with pytest.raises(SettingsError, match=r"lack at"):  # its other keyword is no substitute
        check_seams(TrainSettings(schedule=f"{HERE}:needs_at", schedule_args={"factor": 0.1}))
    s = TrainSettings(lr=0.1, epochs=1, schedule=f"{HERE}:needs_at", schedule_args={"at": 0.5})
    check_seams(s)
    assert lrs(s, 4) == pytest.approx([0.1, 0.1, 0.05, 0.05])


def test_keyword_only_and_star_keyword_parameters_are_the_users_keywords():
    from trainers import check_seams

    check_seams(TrainSettings(schedule=f"{HERE}:keyword_only", schedule_args={"at": 0.25}))
    with pytest.raises(SettingsError, match=r"schedule_args.factor is not a keyword of schedule "
                                            r".*:keyword_only \(it takes at\)"):
        check_seams(TrainSettings(schedule=f"{HERE}:keyword_only", schedule_args={"factor": 1}))
    # **kwargs: any keyword; *args: the trainer's arguments, whatever their number
    check_seams(TrainSettings(schedule=f"{HERE}:any_keywords", schedule_args={"anything": 1}))
    s = TrainSettings(lr=0.1, epochs=1, schedule=f"{HERE}:star_args", schedule_args={"at": 0.25})
    check_seams(s)
    assert lrs(s, 4) == pytest.approx([0.1, 0.05, 0.05, 0.05])
    with pytest.raises(SettingsError, match=r"schedule_args.factor is not a keyword of schedule "
                                            r".*:star_args \(it takes at\)"):
        check_seams(TrainSettings(schedule=f"{HERE}:star_args", schedule_args={"factor": 1}))
    with pytest.raises(SettingsError, match=r"^schedule_args lack at, which schedule "
                                            r".*:star_args_needs_at needs"):
        check_seams(TrainSettings(schedule=f"{HERE}:star_args_needs_at"))


def test_a_user_function_taking_fewer_arguments_than_the_trainer_passes_is_refused():
    from trainers import check_seams

    with pytest.raises(SettingsError, match=rf"^schedule must take the trainer's arguments "
                                            rf"\(step, total_steps, warmup_steps\) first, then "
                                            rf"keywords; it takes \(step, total_steps\), got "
                                            rf"'{HERE}:two_of_three'$"):
        check_seams(TrainSettings(schedule=f"{HERE}:two_of_three"))
