"""explain's weakest families, in wordings beyond the dev corpus (issue 18 item 6, issue 22 item 14):
apex and an fp16 model under autocast shown by the text, GradScaler/unscale told in words, optimizer
state vs loss, a loss scale collapsing in numbers, cuBLAS NOT_SUPPORTED with half types, float8; and
the facts of the machine explain runs on, which only break ties and say so."""

from __future__ import annotations

import pytest

from dtype_doctor.cli import main
from dtype_doctor.explaining import explain
from dtype_doctor.explaining.environment import Environment, capability

CASES = [
    # apex from the text
    (
        'Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n    output = model(images)\n  File "/opt/conda/lib/python3.8/site-packages/apex/amp/_initialize.py", line 197, in new_fwd\n    **applier(kwargs, input_caster))\n  File "/opt/conda/lib/python3.8/site-packages/torch/nn/modules/conv.py", line 443, in forward\n    return self._conv_forward(input, self.weight, self.bias)\nRuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.cuda.HalfTensor) should be the same',
        "apex-conflict",
    ),
    (
        '  File "C:\\Users\\me\\anaconda3\\envs\\sd\\lib\\site-packages\\apex\\normalization\\fused_layer_norm.py", line 38, in forward\n    input_, ctx.normalized_shape, weight_, bias_, ctx.eps)\nRuntimeError: expected scalar type Float but found Half',
        "apex-conflict",
    ),
    (
        'Selected optimization level O2:  FP16 training with FP32 batchnorm and FP32 master weights.\nDefaults for this optimization level are:\nenabled                : True\nopt_level              : O2\ncast_model_type        : torch.float16\nepoch 0 step 0\nTraceback (most recent call last):\n  File "main.py", line 301, in <module>\n    loss = criterion(out, y)\nRuntimeError: expected scalar type Half but found Float',
        "apex-conflict",
    ),
    (
        "with amp.scale_loss(loss, optimizer) as scaled_loss:\n    scaled_loss.backward()\nRuntimeError: expected scalar type Float but found Half",
        "apex-conflict",
    ),
    (
        '[rank1]:   File "/workspace/Megatron-LM/megatron/model/fused_layer_norm.py", line 62, in forward\n[rank1]:     output = fused_layer_norm_cuda.forward_affine(\n[rank1]: RuntimeError: expected scalar type BFloat16 but found Float',
        "apex-conflict",
    ),
    ("ModuleNotFoundError: No module named 'fused_layer_norm_cuda'", "apex-conflict"),
    (
        "I'm using apex amp O1 and get RuntimeError: expected scalar type Half but found Float in the decoder",
        "apex-conflict",
    ),
    # fp16 model under autocast
    (
        'model = model.half()\nwith torch.autocast("cuda", dtype=torch.bfloat16):\n    out = model(x)\nRuntimeError: expected scalar type BFloat16 but found Half',
        "autocast-half-conflict",
    ),
    (
        'pipe = StableDiffusionPipeline.from_pretrained(mid, torch_dtype=torch.float16).to("cuda")\nwith torch.autocast("cuda"):\n    image = pipe(prompt).images[0]\nRuntimeError: expected scalar type Half but found Float',
        "autocast-half-conflict",
    ),
    ("RuntimeError: Unexpected floating ScalarType in at::autocast::prioritize", "autocast-half-conflict"),
    (
        "running a .half() model inside torch.cuda.amp.autocast() crashes with a dtype error",
        "autocast-half-conflict",
    ),
    (
        "fp16 model + autocast(dtype=torch.bfloat16) gives mismatched dtypes in layer norm",
        "autocast-half-conflict",
    ),
    # GradScaler / unscale in words
    ("GradScaler throws a ValueError when I call model.half() before training", "fp16-gradient-unscale"),
    ("scaler.unscale_(optimizer) fails because the params are fp16", "fp16-gradient-unscale"),
    ("Can't use torch.cuda.amp.GradScaler with a half precision model", "fp16-gradient-unscale"),
    ("unscaling FP16 grads raises an error with accelerate mixed_precision=fp16", "fp16-gradient-unscale"),
    ("ValueError: Attempting to unscale FP16 gradients.", "fp16-gradient-unscale"),
    # optimizer state vs loss
    ("RuntimeError: Found dtype Half but expected Float in optimizer", "optimizer-state-dtype"),
    (
        '  File "/usr/local/lib/python3.10/dist-packages/torch/optim/adamw.py", line 599, in _multi_tensor_adamw\n    torch._foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)\nRuntimeError: expected dtype float for `end` but got dtype c10::Half',
        "optimizer-state-dtype",
    ),
    (
        "optimizer.step() raises RuntimeError: Found dtype BFloat16 but expected Float",
        "optimizer-state-dtype",
    ),
    (
        '  File "train.py", line 40, in <module>\n    loss.backward()\n  File "/usr/lib/python3/site-packages/torch/_tensor.py", line 522, in backward\n    torch.autograd.backward(\n  File "/usr/lib/python3/site-packages/torch/autograd/__init__.py", line 266, in backward\n    Variable._execution_engine.run_backward(\nRuntimeError: Found dtype Float but expected Half',
        "loss-dtype-mismatch",
    ),
    ("RuntimeError: Found dtype Long but expected Float", "loss-dtype-mismatch"),
    # loss scale collapsing, in numbers
    (
        "step 100 | loss 2.31 | loss_scale 65536\nstep 200 | loss 2.29 | loss_scale 16384\nstep 300 | loss 2.40 | loss_scale 512\nstep 400 | loss 2.45 | loss_scale 2",
        "grad-scaler-overflow",
    ),
    (
        "Epoch 3: 100%|##########| 500/500 [01:40<00:00, loss=2.31, grad_scale=6.1035e-05]",
        "grad-scaler-overflow",
    ),
    ("my loss scale goes 65536 -> 32768 -> 16384 -> 1 and then nothing learns", "grad-scaler-overflow"),
    ("print(scaler.get_scale())  # 0.0 after 300 steps", "grad-scaler-overflow"),
    (
        " iteration      300/  10000 | learning rate: 1.5E-04 | lm loss: 7.51E+00 | loss scale: 1.0 | number of skipped iterations:  12 | number of nan iterations:   0 |",
        "grad-scaler-overflow",
    ),
    (
        "[2024-03-01 10:00:01,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1",
        "grad-scaler-overflow",
    ),
    # cuBLAS NOT_SUPPORTED with half types
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, CUBLAS_GEMM_DFALT_TENSOR_OP)`",
        "half-unsupported-kernel",
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedExFix( handle, opa, opb, m, n, k, (void*)(&falpha), a, CUDA_R_16BF, lda, stridea, b, CUDA_R_16BF, ldb, strideb, (void*)(&fbeta), c, CUDA_R_16BF, ldc, stridec, num_batches, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
        "bf16-unsupported-hardware",
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul( ltHandle, computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), mat2_ptr, Bdesc.descriptor(), &beta_val, result_ptr, Cdesc.descriptor(), result_ptr, Cdesc.descriptor(), &heuristicResult.algo, workspace.data_ptr(), workspaceSize, at::cuda::getCurrentCUDAStream())` with transpose_mat1 1 transpose_mat2 0 m 4096 n 8 k 4096 mat1_ld 4096 mat2_ld 4096 result_ld 4096 abcType 14 computeType 68 scaleType 0",
        "bf16-unsupported-hardware",
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`\r\nCUDA kernel errors might be asynchronously reported at some other API call",
        "half-unsupported-kernel",
    ),
    # float8
    (
        "RuntimeError: Promotion for Float8 Types is not supported, attempted to promote Float8_e4m3fn and Float",
        "float8-dtype",
    ),
    (
        "RuntimeError: Promotion for Float8 Types is not supported, attempted to promote Float8_e5m2 and BFloat16",
        "float8-dtype",
    ),
]


@pytest.mark.parametrize(("text", "code"), CASES, ids=[f"{c}-{i}" for i, (_, c) in enumerate(CASES)])
def test_weak_family_wordings(text, code):
    assert explain(text).codes()[0] == code


def test_float8_promotion_has_its_own_family_and_no_fp16_cast_fix():
    f = explain(
        "RuntimeError: Promotion for Float8 Types is not supported, attempted to promote Float8_e4m3fn and Float"
    ).findings[0]
    assert f.code == "float8-dtype"
    assert [(o.role, o.dtype) for o in f.operands] == [("left", "float8_e4m3fn"), ("right", "float32")]
    assert "torch.float16" not in " ".join(x.snippet for x in f.fixes)
    assert "_scaled_mm" in " ".join(x.snippet for x in f.fixes)


def test_a_float8_weight_in_a_matmul_is_dequantized_not_cast_to():
    f = explain(
        "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float8_e4m3fn"
    ).findings[0]
    assert f.code == "matmul-dtype-mismatch"
    assert f.fixes[0].title.startswith("A float8 operand: dequantize")
    assert not any(".to(torch.float8" in x.snippet or "dtype=torch.float8" in x.snippet for x in f.fixes)


BARE = "RuntimeError: expected scalar type Half but found Float"


def test_environment_breaks_a_tie_and_says_so():
    here = Environment(packages={"apex": "nvidia 0.1"}, gpus=[])
    f = explain(BARE, env=here).findings[0]
    assert f.code == "apex-conflict" and f.confidence <= 0.6
    assert f.data["decided_by_environment"] == {"env-apex": "NVIDIA apex installed (nvidia 0.1)"}
    assert any("(environment evidence)" in e.text for e in f.evidence)
    assert explain(BARE).codes() == ["scalar-type-mismatch"]  # no environment: the text alone
    assert explain(BARE, env=Environment(packages={"apex": "other 0.9"}, gpus=[])).codes() == [
        "scalar-type-mismatch"
    ]


def test_environment_never_overrides_what_the_text_decides():
    here = Environment(packages={"apex": "nvidia 0.1"}, gpus=[("Tesla V100-SXM2-16GB", 7.0)])
    text = (
        '  File "/usr/lib/python3/site-packages/torch/nn/modules/conv.py", line 456, in _conv_forward\n'
        + BARE
    )
    assert explain(text, env=here).codes() == ["conv-weight-dtype-mismatch"]
    v100 = Environment(packages={}, gpus=[("Tesla V100-SXM2-16GB", 7.0)])
    f = explain("RuntimeError: \"addmm_cuda\" not implemented for 'BFloat16'", env=v100).findings[0]
    assert f.code == "bf16-unsupported-hardware" and "V100" in f.data["decided_by_environment"]["env-no-bf16"]
    a100 = Environment(packages={}, gpus=[("NVIDIA A100-SXM4-80GB", 8.0)])
    assert explain("RuntimeError: \"addmm_cuda\" not implemented for 'BFloat16'", env=a100).codes() == [
        "half-unsupported-kernel"
    ]


def test_gpu_names_give_their_compute_capability():
    assert capability("Tesla V100-SXM2-32GB") == 7.0 and capability("Tesla T4") == 7.5
    assert capability("NVIDIA A100-SXM4-80GB") == 8.0 and capability("NVIDIA H100 80GB HBM3") == 9.0
    assert capability("Some Future GPU") is None


def test_no_env_reads_nothing(capsys):
    assert main(["explain", BARE, "--json", "--no-env"]) == 0
    assert '"environment"' not in capsys.readouterr().out
