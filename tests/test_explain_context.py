"""Context decides between families: one generic text, many causes, told apart by the frames."""

from __future__ import annotations

import pytest

from dtype_doctor import explain


def _tb(frames: list[tuple[str, str, str]], error: str, prefix: str = "") -> str:
    lines = ["Traceback (most recent call last):"]
    for i, (path, fn, code) in enumerate(frames):
        lines += [f'  File "{path}", line {10 + i}, in {fn}', f"    {code}"]
    lines.append(error)
    return "\n".join(prefix + line for line in lines) + "\n"


SP = "/usr/lib/python3.10/site-packages"
SCALAR = "RuntimeError: expected scalar type Float but found Half"

CASES = [
    (
        [("train.py", "main", "optimizer.step()"), (f"{SP}/torch/optim/adam.py", "_single_tensor_adam",
                                                    "exp_avg.lerp_(grad, 1 - beta1)")],
        "RuntimeError: expected dtype float for `end` but got dtype c10::Half",
        "optimizer-state-dtype",
    ),
    (
        [("model.py", "forward", "out = flash_attn_func(q, k, v, causal=True)"),
         (f"{SP}/flash_attn/flash_attn_interface.py", "_flash_attn_forward", "out = flash_attn_cuda.fwd(")],
        SCALAR,
        "flash-attention-dtype",
    ),
    (
        [("infer.py", "main", "out = model.generate(**inputs)"),
         (f"{SP}/bitsandbytes/nn/modules.py", "forward", "out = bnb.matmul_4bit(x, self.weight.t(), bias=bias)")],
        SCALAR,
        "quantized-compute-dtype",
    ),
    (
        [("run.py", "main", "y = scripted(x)"), (f"{SP}/torch/jit/_script.py", "forward", "return self._c(x)")],
        SCALAR + "\nThe following operation failed in the TorchScript interpreter.",
        "jit-fuser-half",
    ),
    (
        [("train.py", "step", "loss = criterion(logits, target)"),
         (f"{SP}/torch/nn/modules/loss.py", "forward", "return F.cross_entropy(input, target)")],
        "RuntimeError: expected scalar type Float but found Double",
        "loss-dtype-mismatch",
    ),
    (
        [("t5.py", "forward", "hidden_states = self.final_layer_norm(hidden_states)"),
         (f"{SP}/apex/normalization/fused_layer_norm.py", "forward", "return fused_rms_norm_affine(input, w)")],
        SCALAR,
        "apex-conflict",
    ),
    (
        [("attn.py", "forward", "scores = torch.bmm(q, k.transpose(1, 2))")],
        SCALAR,
        "matmul-dtype-mismatch",
    ),
    ([("plain.py", "main", "y = thing(x)")], SCALAR, "scalar-type-mismatch"),
    (
        [("mac.py", "main", "x = x.to('mps')"), (f"{SP}/torch/nn/modules/module.py", "convert", "return t.to(device)")],
        'RuntimeError: "upsample_nearest2d" not implemented for \'Half\'',
        "mps-dtype-unsupported",
    ),
    (
        [("gpu.py", "main", "y = model(x.cuda())")],
        'RuntimeError: "addmm_cuda" not implemented for \'BFloat16\'',
        "half-unsupported-kernel",  # a kernel this build lacks, not the GPU: other bf16 ops still run
    ),
]  # fmt: skip


@pytest.mark.parametrize(("frames", "error", "code"), CASES, ids=[c[2] for c in CASES])
def test_frames_decide_the_family(frames, error, code):
    report = explain(_tb(frames, error))
    assert report.findings[0].code == code, report.findings[0].data


def test_context_of_one_error_does_not_leak_into_another():
    apex_tb = _tb(CASES[5][0], SCALAR)
    plain = _tb(
        [("a.py", "f", "y = lin(x)")],
        "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float",
    )
    codes = explain(apex_tb + "\n" + plain).codes()
    assert sorted(codes) == ["apex-conflict", "matmul-dtype-mismatch"]


def test_ranks_interleaved_line_by_line_keep_their_own_frames():
    a = _tb([("r.py", "f", "h = self.proj(x)")], SCALAR, "[rank0]: ").splitlines()
    b = _tb([("s.py", "g", "h = self.norm(x)")], SCALAR, "[rank1]: ").splitlines()
    log = "\n".join(x for pair in zip(a, b, strict=True) for x in pair) + "\n"
    report = explain(log)
    assert sorted((f.location.module, f.location.rank) for f in report.findings) == [("norm", 1), ("proj", 0)]


IPYTHON = """---------------------------------------------------------------------------
RuntimeError                              Traceback (most recent call last)
Cell In[7], line 3
      1 vae = AutoencoderKL.from_pretrained(path).half()
      2 latents = torch.randn(1, 4, 64, 64)
----> 3 image = vae.decode(latents).sample

File ~/venv/lib/python3.11/site-packages/diffusers/models/autoencoders/autoencoder_kl.py:291, in AutoencoderKL._decode(self, z, return_dict)
    288 if self.use_tiling and (z.shape[-1] > self.tile_latent_min_size):
    289     return self.tiled_decode(z, return_dict=return_dict)
--> 291 z = self.post_quant_conv(z)
    292 dec = self.decoder(z)

File ~/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py:456, in Conv2d._conv_forward(self, input, weight, bias)
    452 if self.padding_mode != 'zeros':
    453     return F.conv2d(F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode),
    454                     weight, bias, self.stride,
    455                     _pair(0), self.dilation, self.groups)
--> 456 return F.conv2d(input, weight, bias, self.stride,
    457                 self.padding, self.dilation, self.groups)

RuntimeError: Input type (float) and bias type (c10::Half) should be the same
"""


def test_jupyter_traceback_gives_module_and_location():
    f = explain(IPYTHON).findings[0]
    assert f.code == "conv-bias-dtype-mismatch"
    assert f.location.module == "post_quant_conv"
    assert f.location.line == 291 and f.location.function == "_decode"
    assert f.location.op == "conv._conv_forward"
    assert "vae" in f.data["context"]
    assert "VAE" in f.fixes[0].title or "vae" in f.fixes[0].snippet
