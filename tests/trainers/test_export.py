"""Exported files reload from themselves alone and behave like the eager model."""
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from trainers import CheckpointError, TrainSettings, train
from trainers.checkpoint import load_weights, save_weights
from trainers.datasets import load_data
from trainers.export import FORMATS, export, raw_pixels

pytestmark = pytest.mark.slow  # a model trained, then exported to every format

RELOAD = """
import json, sys
import numpy as np
folder = sys.argv[1]
pixels = np.load(folder + "/input_example.npy", allow_pickle=False)
out = {}
import onnxruntime as ort
for name in ("model.onnx", "model.int8.onnx"):
    s = ort.InferenceSession(folder + "/" + name, providers=["CPUExecutionProvider"])
    logits, classes = s.run(None, {"pixels": pixels})
    out[name] = logits.tolist()
meta = s.get_modelmeta().custom_metadata_map["sweep"]
out["onnx_classes"] = json.loads(meta)["classes"]
import torch
extra = {"sweep.json": ""}
m = torch.export.load(folder + "/model.pt2", extra_files=extra).module()
out["model.pt2"] = m(torch.from_numpy(pixels))[0].tolist()
out["pt2_classes"] = json.loads(extra["sweep.json"])["classes"]
ts = torch.jit.load(folder + "/model.ts")
out["model.ts"] = ts(torch.from_numpy(pixels))[0].tolist()
out["project_imported"] = any(k.split(".")[0] in ("trainers", "orchestrator")
                              for k in sys.modules)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def trained():
    s = TrainSettings(epochs=2, seed=4)
    return s, train(s).model


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    s, model = trained
    out = tmp_path_factory.mktemp("export")
    return s, model, export(s, model, out, formats=FORMATS), out


def test_every_format_passes_parity_at_every_batch_size(exported):
    _, _, report, _ = exported
    assert set(report.formats) == set(FORMATS)
    for fmt, r in report.formats.items():
        assert r["error"] is None, (fmt, r["error"])
        assert r["passed"], (fmt, r)
        assert set(r["batches"]) == {"1", "4", "full"}
        assert r["batches"]["full"]["images"] == 360  # the whole digits validation set
        assert set(r["latency"]) == {"ms_per_image_b1", "ms_per_image_b32"}
    assert report.formats["onnx"]["opset"] == 18
    assert report.formats["torchscript"]["method"] == "script"
    int8 = report.formats["int8"]
    assert int8["size_bytes_int8"] < int8["size_bytes_float"]
    assert json.loads((report.out_dir / "export.json").read_text())["formats"]["onnx"]["passed"]


def test_files_reload_without_project_code_and_match_eager(exported):
    s, model, _, out = exported
    proc = subprocess.run([sys.executable, "-I", "-c", RELOAD, str(out)], capture_output=True,
                          text=True, timeout=300, cwd=out)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not got["project_imported"]
    pixels = np.load(out / "input_example.npy")
    assert pixels.dtype == np.uint8 and pixels.max() <= 16  # digits' raw 0..16 values
    norm = torch.from_numpy(pixels).float() / 16.0
    with torch.no_grad():
        eager = model.eval()(norm).numpy()
    for name in ("model.onnx", "model.pt2", "model.ts"):
        np.testing.assert_allclose(np.array(got[name]), eager, atol=1e-4)
    assert (np.array(got["model.int8.onnx"]).argmax(1) == eager.argmax(1)).mean() >= 0.5
    assert got["onnx_classes"] == got["pt2_classes"] == [str(i) for i in range(10)]


def test_raw_pixels_undo_the_normalisation_exactly():
    data = load_data(TrainSettings())
    pixels, labels = raw_pixels(data)
    x, y = data.val.tensors
    assert pixels.dtype == torch.uint8 and torch.equal(labels, y)
    assert torch.equal(pixels.float() / 16.0, x)


def test_a_trace_freezes_a_batch_size_branch_and_parity_catches_it(tmp_path):
    from tests.datasets import batch_dependent

    model = batch_dependent(10, 1)
    model(torch.zeros(2, 1, 8, 8))  # materialise the lazy layer
    s = TrainSettings(model="tests.datasets:batch_dependent")
    traced = export(s, model, tmp_path / "trace", formats=("torchscript",),
                    torchscript_method="trace").formats["torchscript"]
    scripted = export(s, model, tmp_path / "script", formats=("torchscript",),
                      torchscript_method="script").formats["torchscript"]
    assert traced["method"] == "trace" and not traced["passed"]
    assert not traced["batches"]["1"]["passed"] and traced["batches"]["4"]["passed"]
    assert scripted["method"] == "script" and scripted["passed"]


def test_export_is_done_in_eval_mode(tmp_path):
    from torch import nn

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Dropout(0.5), nn.Linear(32, 10))
    model.train()
    report = export(TrainSettings(), model, tmp_path, formats=("onnx",))
    assert report.formats["onnx"]["passed"]  # dropout on would never match
    assert not model.training


def test_an_export_failure_is_reported_not_raised(tmp_path):
    from torch import nn

    class ValueBranch(nn.Module):  # branches on a tensor's value: no graph can hold that
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(64, 10)

        def forward(self, x):
            out = self.linear(x.flatten(1))
            if out.sum() > 0:
                return out.nonzero().float()
            return out

    report = export(TrainSettings(), ValueBranch(), tmp_path, formats=("onnx",))
    assert report.formats["onnx"]["error"] and not report.formats["onnx"]["passed"]


def test_weights_never_unpickle_arbitrary_objects(tmp_path, trained):
    _, model = trained
    good = save_weights(model, tmp_path / "w.pt")
    assert set(load_weights(good)) == set(model.state_dict())

    class Payload:
        def __reduce__(self):
            return (print, ("unpickled!",))

    bad = tmp_path / "bad.pt"
    torch.save({"weight": torch.zeros(1), "x": Payload()}, bad)
    with pytest.raises(CheckpointError, match="cannot read weights"):
        load_weights(bad)
    plain = tmp_path / "plain.pt"
    plain.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError):
        load_weights(plain)


def _exported_onnx_and_eager(exported):
    from trainers.export import load_onnx, wrap

    settings, model, _, out = exported
    data = load_data(settings)
    wrapper = wrap(model.cpu(), data)

    def eager(x):
        with torch.no_grad():
            return wrapper(torch.as_tensor(x))[0].numpy()

    pixels, labels = raw_pixels(data)
    return load_onnx(out / "model.onnx"), eager, pixels[:40], labels[:40]  # 40 images: quick


@pytest.mark.parametrize("times_tolerance, passes", [(0.5, True), (2.0, False)])
def test_parity_holds_the_exported_logits_to_its_tolerance(exported, times_tolerance, passes):
    """The real ONNX file, its logits shifted on one class of one image by a multiple of the
    tolerance (the top-1 class unchanged): within it parity passes, past it parity fails."""
    from trainers.export import MAX_ABS_DIFF, parity

    onnx, eager, pixels, labels = _exported_onnx_and_eager(exported)
    scale = max(1.0, float(np.abs(eager(pixels)).max()))
    shift = times_tolerance * MAX_ABS_DIFF * scale

    def perturbed(x):
        logits = np.array(onnx(x))
        worst = logits[0].argmin()  # the lowest logit: raising it a little keeps the top-1 class
        logits[0, worst] += shift
        return logits

    report = parity(perturbed, eager, pixels, labels)
    assert report["top1_agreement"] == 1.0
    assert report["max_abs_diff"] == pytest.approx(shift, rel=0.05)
    assert report["passed"] is passes


@pytest.mark.parametrize("wrong_share, passes", [(0.0, True), (0.1, False)])
def test_int8_parity_fails_when_accuracy_drops_past_its_limit(exported, wrong_share, passes):
    from trainers.export import parity

    onnx, eager, pixels, labels = _exported_onnx_and_eager(exported)

    def perturbed(x):  # the first wrong_share of each call's images: another class than eager's
        logits = np.array(onnx(x))
        n = int(round(len(logits) * wrong_share))
        other = (logits[:n].argmax(1) + 1) % logits.shape[1]
        logits[:n, :] = 0.0
        logits[np.arange(n), other] = 1.0
        return logits

    report = parity(perturbed, eager, pixels, labels, int8=True)
    assert report["passed"] is passes, report["accuracy_delta"]


def test_the_export_report_holds_plain_types_only(exported):
    # the worker sends it to the sweep process, which must not import torch to unpickle it
    # (a TorchVersion in it cost that process a second at the end of every sweep)
    report = exported[2].to_dict()
    code = ("import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(report),
                         capture_output=True, timeout=120)
    assert out.stdout.decode().strip() == "[]", out.stderr.decode()
