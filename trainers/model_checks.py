"""The preflight's model checks, on one batch: model, inputs and labels on one device, every
layer registered, a gradient reaching every parameter, raw logits (no softmax before the loss),
the user's seams changing the weights, and no forward pass of a single item."""
from __future__ import annotations

import itertools

import torch
from torch import nn
from torch.nn import functional as F

from . import seams
from .checks import Context, Stop, first_line
from .loop import build_run, forward_loss, user_metrics
from .runtime import prepare_inputs, resolve_device
from .settings import CUDA_METRICS, EPOCH_METRICS
from .verdicts import FAIL, PASS, WARN


def device_check(ctx: Context) -> None:
    s = ctx.settings
    ctx.device = ctx.guarded("devices", lambda: resolve_device(s.device))
    ctx.run = ctx.guarded("model", lambda: build_run(s, ctx.device, ctx.data))
    step = ctx.guarded("devices", lambda: next(iter(ctx.run.train_batches.epoch(1))))
    x, y = step.micro_batches[0]
    ctx.batch = (x, y)
    params = sorted({f"{p.device} {p.dtype}".replace("torch.", "")
                     for p in ctx.run.model.parameters()})
    evidence = (f"model {', '.join(params) or 'no parameters'} | inputs {x.device} "
                f"{x.dtype} | labels {y.device} {y.dtype}".replace("torch.", ""))
    devices = {p.device for p in ctx.run.model.parameters()} | {x.device, y.device}
    if len(devices) > 1:
        ctx.add("devices", FAIL, evidence, "model, inputs and labels are not on one device",
                "move the model with model.to(device) and every batch's inputs and labels too")
        raise Stop
    if y.dtype != torch.int64:
        ctx.add("devices", FAIL, evidence, "labels reach the loss as a non-long dtype",
                "labels must be torch.long class indices")
        raise Stop
    ctx.add("devices", PASS, evidence)


def registration_check(ctx: Context) -> None:
    hidden = []
    for owner, module in ctx.run.model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            items = (value.values() if isinstance(value, dict) else
                     value if isinstance(value, (list, tuple, set)) else ())
            found = [v for v in items if isinstance(v, (nn.Module, nn.Parameter))]
            if found:
                n = sum(p.numel() for v in found for p in
                        (v.parameters() if isinstance(v, nn.Module) else [v]))
                kind = "dict" if isinstance(value, dict) else type(value).__name__
                hidden.append(f"{owner + '.' if owner else ''}{attr} (a plain {kind} of "
                              f"{len(found)} module(s), {n} parameters)")
    if hidden:
        ctx.add("registration", FAIL, "; ".join(hidden[:3]),
                "layers kept in a plain Python list or dict are invisible to "
                "model.parameters(): the optimizer never updates them and .to(device) never "
                "moves them", "use nn.ModuleList / nn.ModuleDict (nn.ParameterList for "
                              "parameters)")
    else:
        total = sum(p.numel() for p in ctx.run.model.parameters())
        ctx.add("registration", PASS, f"{total} parameters, all registered")


def gradient_check(ctx: Context) -> None:
    model, (x, y) = ctx.run.model, ctx.batch
    model.train()
    model.zero_grad(set_to_none=True)
    logits = ctx.guarded("gradients", lambda: model(x))
    if not isinstance(logits, torch.Tensor):
        ctx.add("gradients", FAIL, f"the model returned a {type(logits).__name__}, not a tensor",
                "the model must return one logits tensor (N x num_classes)",
                "return the logits alone; for a model returning (logits, aux) or a dict, wrap "
                "it in a module whose forward returns only the logits")
        raise Stop
    loss = F.cross_entropy(logits.float(), y) if logits.shape[-1:] == (ctx.data.num_classes,) \
        else logits.float().sum()
    if not loss.requires_grad:
        ctx.add("gradients", FAIL, "the loss has no grad_fn",
                "the model's output is detached from its parameters (.detach(), .item(), "
                "torch.no_grad() or .data inside forward)",
                "keep the forward pass differentiable from input to logits")
        raise Stop
    loss.backward()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    dead = [n for n, p in named if p.grad is None or not bool(p.grad.ne(0).any())]
    if len(dead) == len(named):
        ctx.add("gradients", FAIL, f"none of {len(named)} parameter tensors got a gradient",
                "the output is detached from the parameters", "remove the detach in forward")
    elif dead:
        ctx.add("gradients", WARN, f"{len(dead)} of {len(named)} parameter tensors got no "
                                   f"gradient: {', '.join(dead[:4])}",
                "those layers are unused, frozen by a detach, or behind a dead ReLU",
                "remove unused layers, or the detach that cuts them off")
    else:
        ctx.add("gradients", PASS, f"all {len(named)} parameter tensors got a gradient")
    model.zero_grad(set_to_none=True)


def loss_wiring_check(ctx: Context) -> None:
    model, (x, _) = ctx.run.model, ctx.batch
    model.eval()
    with torch.no_grad():
        out = ctx.guarded("loss_wiring", lambda: model(x))  # eval mode: its own path
    if not isinstance(out, torch.Tensor):
        ctx.add("loss_wiring", FAIL, f"in eval mode the model returned a {type(out).__name__}, "
                                     f"not a tensor", "evaluation and export read one logits "
                                                      "tensor", "return the logits alone in "
                                                                "eval mode too")
        raise Stop
    out = out.float()
    k = ctx.data.num_classes
    if out.ndim != 2 or out.shape[1] != k:
        ctx.add("loss_wiring", FAIL, f"logits shape {tuple(out.shape)}, expected "
                                     f"({len(x)}, {k})",
                "the model's head does not produce one logit per class",
                f"end the model with a layer of {k} outputs")
        raise Stop
    sums = out.sum(1)
    if bool((out >= 0).all()) and torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        ctx.add("loss_wiring", FAIL, "every output row is non-negative and sums to 1",
                "the model ends in a softmax; CrossEntropyLoss applies log-softmax itself, so "
                "gradients shrink and training stalls", "return raw logits (drop the softmax)")
    elif bool((out <= 0).all()) and torch.allclose(out.logsumexp(1), torch.zeros_like(sums),
                                                   atol=1e-3):
        ctx.add("loss_wiring", FAIL, "every output row is a log-probability distribution",
                "the model ends in a log_softmax before CrossEntropyLoss (a double softmax)",
                "return raw logits (drop the log_softmax)")
    else:
        ctx.add("loss_wiring", PASS, f"logits {tuple(out.shape)}, values in "
                                     f"[{float(out.min()):.3g}, {float(out.max()):.3g}]")


def seams_check(ctx: Context) -> None:
    """The user's optimizer, schedule, loss, step and metrics run as training runs them: one
    optimizer step on the first batch must change the weights. A row only with user code."""
    s, run = ctx.settings, ctx.run
    users = [f"{seam} {getattr(s, seam)}" for seam in ("optimizer", "schedule", "loss", "step")
             if seams.is_user_code(seam, getattr(s, seam))]
    if not users and not s.metrics:
        return
    (x, y), params = ctx.batch, [p for p in run.module.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    run.model.train()
    run.optimizer.zero_grad(set_to_none=True)
    loss, logits = ctx.guarded("seams", lambda: forward_loss(run, prepare_inputs(s, x), y))
    ctx.guarded("seams", loss.backward)
    lr = run.optimizer.param_groups[0]["lr"]
    ctx.guarded("seams", run.optimizer.step)
    ctx.guarded("seams", run.scheduler.step)
    changed = sum(not torch.equal(a, p.detach()) for a, p in zip(before, params))
    evidence = (f"{'; '.join(users) or 'built-in seams'}: one step (lr {lr:.3g}, loss "
                f"{float(loss.detach()):.3g}) changed {changed} of {len(params)} parameter tensors")
    if changed == 0:
        blame = " or ".join(u.split()[0] for u in users if u.split()[0] in ("optimizer",
                                                                            "step")) or "loss"
        ctx.add("seams", FAIL, evidence, f"the user's {blame} leaves the weights as they were: "
                                         f"the sweep would train nothing",
                "update every parameter of the groups the optimizer is given (in step()), and "
                "return a loss computed from the model's output")
        raise Stop
    if s.metrics:
        run.model.eval()
        with torch.no_grad():
            out = run.model(prepare_inputs(s, x)).float()
        values = ctx.guarded("seams", lambda: user_metrics(run.metric_fns, out, y,
                                                           {"val_loss", "val_acc"}))
        evidence += "; metrics on the batch: " + ", ".join(f"{k} {v:.3g}"
                                                           for k, v in values.items())
        ctx.report.metrics = [*EPOCH_METRICS, *(CUDA_METRICS if ctx.device.type == "cuda" else ()),
                              *values]
    ctx.add("seams", PASS, evidence)


def last_batch_check(ctx: Context) -> None:
    """Where an epoch leaves a forward pass of one item, that item trains: BatchNorm over one
    value per channel raises mid-epoch. A row only when some forward pass sees one item."""
    s, n = ctx.settings, len(ctx.data.train)
    order = ctx.run.train_batches.order
    if min(len(m) for micro, _, _ in order.steps() for m in micro) > 1:
        return
    model, (x, y) = ctx.run.model, ctx.batch
    model.train()
    k = s.grad_accum_steps
    evidence = (f"an epoch of {n} items in batches of {s.batch_size}"
                f"{f' (each in {k} forward passes)' if k > 1 else ''} leaves a forward pass of "
                f"one item")
    try:
        F.cross_entropy(model(x[:1]).float(), y[:1]).backward()
    except Exception as e:  # noqa: BLE001 - the model's own verdict on a batch of one
        # the next batch_size grad_accum_steps divides that leaves no forward pass of one item
        better = next(b for b in itertools.count(s.batch_size + k, k)
                      if not _leaves_one_item(n, b, k))
        ctx.add("last_batch", FAIL, f"{evidence}; the model raises on it: "
                                    f"{type(e).__name__}: {first_line(e)}",
                "the model cannot train on a single item (BatchNorm needs two values per "
                "channel)", f"choose a batch_size that leaves no single item (e.g. {better}), "
                            f"or a dataset size that does")
    else:
        ctx.add("last_batch", PASS, f"{evidence}; the model trains on it")
    finally:
        model.zero_grad(set_to_none=True)


def _leaves_one_item(n: int, batch_size: int, grad_accum_steps: int) -> bool:
    """Whether an epoch of ``n`` items in batches of ``batch_size``, each cut into
    ``grad_accum_steps`` forward passes the way :class:`trainers.batches.EpochOrder` cuts them
    (``tensor_split``), has a forward pass of one item (in a full batch or the last one)."""
    last = n % batch_size
    return any(len(part) == 1 for size in {batch_size, last} - {0}
               for part in torch.arange(size).tensor_split(grad_accum_steps))
