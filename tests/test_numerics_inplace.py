"""A tensor changed in place after a module returned it is measured again where it is next seen:
the overflow of transformers' ResNet `hidden_state += residual` is blamed on that line, not on the
activation that receives the result (numerics/monitor._known: the tensor's version counter)."""

from __future__ import annotations

import inspect

import torch
from transformers import ResNetConfig, ResNetModel
from transformers.models.resnet import modeling_resnet

from dtype_doctor.numerics import NumericsMonitor


def _resnet_whose_first_residual_add_overflows() -> ResNetModel:
    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    model = ResNetModel(config).eval()
    with torch.no_grad():
        embedder = model.embedder.embedder  # conv, batch norm, relu: the residual is 30000 everywhere
        embedder.normalization.weight.zero_()
        embedder.normalization.bias.fill_(30000.0)
        first, second = model.encoder.stages[0].layers[0].layer
        first.convolution.weight.zero_()
        second.convolution.weight.zero_()
        second.normalization.weight.zero_()
        second.normalization.bias.fill_(40000.0)  # finite in float16; 40000 + 30000 is not
    return model.half()


def _residual_add_line() -> int:
    lines, start = inspect.getsourcelines(modeling_resnet.ResNetBasicLayer.forward)
    return start + next(i for i, text in enumerate(lines) if "hidden_state += residual" in text)


def test_an_in_place_residual_add_that_overflows_is_blamed_on_its_line_not_on_the_activation():
    model = _resnet_whose_first_residual_add_overflows()
    pixels = torch.randn(1, 3, 32, 32).half()
    with NumericsMonitor(model=model) as monitor, torch.no_grad():
        model(pixels)
        model(pixels)  # the op inside the layer's forward is named at its next call
    (finding,) = [f for f in monitor.report.findings if f.code == "fp16-overflow"]
    assert finding.location.module == "encoder.stages.0.layers.0"
    assert finding.location.op == "hidden_state += residual"
    assert finding.location.file == modeling_resnet.__file__ and finding.location.line == _residual_add_line()
    assert "activation" not in (finding.location.module or "")
    # transformers' loading switch names a module by its last name: "0" would keep the first item
    # of every list in float32, so it is not offered for a module that is an index in a list
    assert not any("_keep_in_fp32_modules" in fix.snippet for fix in finding.fixes)
    assert finding.fixes  # what is left: keep the layer in float32, run in bfloat16
