"""Context that decides between families and between fixes. Data only.

Scopes: "op" = the two deepest frames of the error's traceback (which op raised);
"local" = the error line and its whole traceback; "log" = anywhere in the input.
"""

from __future__ import annotations

from .libraries import library
from .model import ContextSignal, Refinement

_ = frozenset

# words of a pasted message's surroundings (ignorecase). Not "with apex" or "nvidia/apex": `Better
# speed can be achieved with apex installed from https://www.github.com/nvidia/apex` means no apex.
_APEX_WORDS = ("apex amp", "apex o1", "apex o2", "using apex", "nvidia apex", "apex fp16", "apex's", "--apex",
               "use_apex", "apex_amp", "amp o1", "amp o2", "opt level o", "opt_level o", "apex.amp",
               "apex.normalization")  # fmt: skip
_OPTIMIZER_WORDS = ("in optimizer", "in the optimizer", "optimizer step", "optimizer.step", "in adam", "adamw",
                    "exp_avg", "optimizer state", "_foreach_", "fused adam", "fused_adam", "momentum_buffer",
                    "opt.step(", "optim.step")  # fmt: skip
_AUTOCAST_WORDS = ("under autocast", "with autocast", "autocast enabled", "using autocast", "autocast on",
                   "inside autocast", "in autocast", "autocast context")  # fmt: skip
_HALF_MODEL_WORDS = ("model.half", "fp16 model", "half model", "model in fp16", "model in half",
                     "half-precision model", "float16 model", "model to fp16", "model to half", "weights in fp16",
                     "fp16 weights", "half weights", "fp16 checkpoint")  # fmt: skip

CONTEXT_SIGNALS: tuple[ContextSignal, ...] = (
    # -- which op raised (deepest frames) ------------------------------------------------------
    ContextSignal("op-linear", ("linear.py", "F.linear", "functional.linear", "in linear"), scope="op"),
    ContextSignal(
        "matmul-call",
        ("torch.bmm", "torch.matmul", "torch.mm(", " @ ", "baddbmm", "einsum", ".bmm(", ".matmul(", ".mm("),
        scope="op",
    ),
    ContextSignal(
        "op-conv",
        (
            "conv.py",
            "_conv_forward",
            "F.conv",
            "conv1d(",
            "conv2d(",
            "conv3d(",
            "thnn_conv",
            "cudnn_convolution",
            "mkldnn_convolution",
        ),
        scope="op",
    ),
    ContextSignal(
        "op-norm",
        (
            "layer_norm",
            "group_norm",
            "batch_norm",
            "rms_norm",
            "normalization.py",
            "LayerNorm",
            "GroupNorm",
            "RMSNorm",
            "instance_norm",
        ),
        scope="op",
    ),
    ContextSignal(
        "loss",
        (
            "loss.py",
            "cross_entropy",
            "nll_loss",
            "mse_loss",
            "binary_cross_entropy",
            "criterion(",
            "loss_fn(",
            "CrossEntropyLoss",
            "NLLLoss",
            "BCELoss",
            "BCEWithLogitsLoss",
            "MSELoss",
        ),
        scope="op",
    ),
    # -- libraries and set-ups in the error's own traceback ----------------------------------------
    ContextSignal(
        "apex",
        (
            "apex/",
            "apex\\",
            "apex.amp",
            "apex.normalization",
            "apex.optimizers",
            "apex.parallel",
            "apex.contrib",
            "apex.fp16_utils",
            "fused_layer_norm",
            "FusedRMSNorm",
            "FusedLayerNorm",
            "fused_rms_norm",
            "amp_C",
            "apex-",
            "import apex",
            "amp.initialize",
            "opt_level",
            "optimization level O",
            "keep_batchnorm_fp32",
            "FP16_Optimizer",
            "fp16_optimizer",
        ),
    ),
    # ...its amp.initialize banner and its API...
    ContextSignal(
        "apex",
        (
            "Selected optimization level O",
            "cast_model_type",
            "patch_torch_functions",
            "amp.scale_loss",
            "scale_loss(",
            "amp.master_params",
            "network_to_half",
            "convert_network",
            "FusedAdam",
            "FusedLAMB",
            "multi_tensor_applier",
            "fused_dense",
            "scaled_masked_softmax_cuda",
            "scaled_upper_triang_masked_softmax",
        ),
    ),
    # ...and in the words around a pasted message
    ContextSignal(
        "apex",
        _APEX_WORDS,
        ignorecase=True,
    ),
    # OneFlow spells data types as its enum (`kFloat16 .vs kFloat`); torch writes c10 names
    ContextSignal(
        "oneflow",
        (
            "oneflow",
            "onediff",
            "OneFlow",
            "OneDiff",
            " kFloat",
            " kHalf",
            " kBFloat16",
            " kDouble",
            "(kFloat",
        ),
    ),
    ContextSignal(
        "autograd",
        (
            "run_backward",
            "_execution_engine",
            ".backward(",
            "autograd/__init__.py",
            "autograd.grad",
            "jacobian(",
        ),
    ),
    ContextSignal("cublas-bf16", ("CUDA_R_16BF",)),
    ContextSignal("flash_attn", library("flash_attn").words),
    ContextSignal("xformers", library("xformers").words),
    ContextSignal(
        "quantized",
        (
            "bitsandbytes",
            "linear4bit",
            "linear8bitlt",
            "auto_gptq",
            "awq",
            "gptq",
            "load_in_8bit",
            "load_in_4bit",
            "bnb_4bit",
            "qlora",
            "8bit",
            "4bit",
            "8-bit",
            "4-bit",
        ),
        ignorecase=True,
    ),
    ContextSignal(
        "gradscaler", ("GradScaler", "grad_scaler.py", "scaler.step", "scaler.unscale_", "scaler.scale(")
    ),
    ContextSignal(
        "vae",
        (
            "autoencoder_kl",
            "AutoencoderKL",
            "vae.decode",
            "vae.encode",
            "post_quant_conv",
            "vae.py",
            "vae_decode",
            "decode_latents",
        ),
    ),
    ContextSignal(
        "autocast",
        (
            "torch.autocast",
            "autocast_mode.py",
            "amp.autocast",
            "autocast(",
            "decorate_autocast",
            "custom_fwd",
        ),
    ),
    ContextSignal(
        "autocast",
        _AUTOCAST_WORDS,
        ignorecase=True,
    ),
    ContextSignal(
        "optimizer",
        (
            "torch/optim/",
            "torch\\optim\\",
            "optimizer.step",
            "_multi_tensor_adam",
            "_single_tensor_adam",
            "_fused_adam",
            "optim/adam",
        ),
    ),
    # ...and in words: `Found dtype Half but expected Float in optimizer`, "when stepping AdamW"
    ContextSignal(
        "optimizer",
        _OPTIMIZER_WORDS,
        ignorecase=True,
    ),
    ContextSignal("torchscript", ("TorchScript", "torch.jit", "torch/jit/", "nvfuser", "nvrtc")),
    ContextSignal(
        "inference",
        (
            "model.chat",
            ".chat(",
            ".generate(",
            "generation/utils.py",
            "inference_mode",
            "no_grad",
            "cli_demo",
            "inference.py",
            "infer.py",
            "pipeline_",
            "predict(",
        ),
    ),
    ContextSignal(
        "training",
        (
            "backward(",
            "optimizer.step",
            "train_step",
            "training_step",
            "Trainer",
            "trainer.py",
            "train.py",
            "train_one_epoch",
        ),
    ),
    ContextSignal(
        "half-model",
        (
            ".half()",
            "torch_dtype=torch.float16",
            "dtype=torch.float16",
            "torch_dtype=torch.bfloat16",
            ".to(torch.float16)",
            ".to(torch.bfloat16)",
        ),
    ),
    ContextSignal(
        "half-model",
        _HALF_MODEL_WORDS,
        ignorecase=True,
    ),
    ContextSignal("cuda", ("cuda", "CUDA", "cublas", "cudnn")),
    ContextSignal("mps", ("MPS", "'mps'", '"mps"', "mps:", "torch.mps", "_mps")),
    # -- facts about the whole run ---------------------------------------------------------------------
    ContextSignal(
        "apex-installed",
        ("apex.normalization", "Discovered apex", "from apex", "import apex", "site-packages/apex"),
        scope="log",
    ),
    ContextSignal("oneflow-installed", library("oneflow").words, scope="log"),
    # apex amp's banner and API anywhere in the run: the run uses apex amp
    ContextSignal(
        "apex",
        (
            "Selected optimization level O",
            "amp.initialize(",
            "amp.scale_loss(",
            "from apex import amp",
            "apex.amp",
        ),
        scope="log",
    ),
    ContextSignal(
        "distributed",
        ("[rank", "torchrun", "torch.distributed", "ChildFailedError", "[default0]", "LOCAL_RANK"),
        scope="log",
    ),
    ContextSignal("deepspeed", library("deepspeed").words, scope="log"),
    ContextSignal("windows", ("struct c10::", "\\site-packages\\", "class c10::"), scope="log"),
)

_MISMATCH = {
    "scalar-type-mismatch",
    "matmul-dtype-mismatch",
    "norm-dtype-mismatch",
    "conv-weight-dtype-mismatch",
    "conv-bias-dtype-mismatch",
}

FLOAT8_OPERAND = Refinement(  # read from the text and from the machine alike
    _({"scalar-type-mismatch", "half-unsupported-kernel"}),
    _({"dtype-float8"}),
    "float8-dtype",
    note="a float8 operand: float8 has no implicit promotion and few kernels",
)

REFINEMENTS: tuple[Refinement, ...] = (
    FLOAT8_OPERAND,
    Refinement(
        _({"matmul-dtype-mismatch", "half-unsupported-kernel"}),
        _({"cublas-bf16"}),
        "bf16-unsupported-hardware",
        note="cuBLAS refused a bfloat16 GEMM: this GPU has no bf16 GEMM",
    ),
    Refinement(
        _({"matmul-dtype-mismatch", "scalar-type-mismatch"}),
        _({"dtype-int8"}),
        "quantized-compute-dtype",
        note="an int8 operand in a matmul: 8-bit quantized weights met the activations",
    ),
    Refinement(
        _(
            {
                "scalar-type-mismatch",
                "norm-dtype-mismatch",
                "matmul-dtype-mismatch",
                "conv-weight-dtype-mismatch",
                "conv-bias-dtype-mismatch",
            }
        ),
        _({"apex"}),
        "apex-conflict",
        note="apex kernels or apex amp in the traceback or the run",
    ),
    Refinement(
        _({"scalar-type-mismatch", "norm-dtype-mismatch"}),
        _({"apex-installed", "op-norm"}),
        "apex-conflict",
        note="apex in the environment and a norm raised",
    ),
    Refinement(_(_MISMATCH), _({"oneflow"}), "oneflow-infer-dtype", note="OneFlow/OneDiff frames"),
    Refinement(_({"scalar-type-mismatch", "half-unsupported-kernel"}), _({"torchscript"}), "jit-fuser-half"),
    Refinement(
        _({"scalar-type-mismatch", "index-put-dtype-mismatch"}), _({"optimizer"}), "optimizer-state-dtype"
    ),
    Refinement(
        _({"loss-dtype-mismatch"}),
        _({"optimizer"}),
        "optimizer-state-dtype",
        unless=_({"autograd", "loss"}),
        note="a gradient's dtype check raised while the optimizer stepped, not in backward()",
    ),
    Refinement(
        _({"scalar-type-mismatch", "matmul-dtype-mismatch"}), _({"quantized"}), "quantized-compute-dtype"
    ),
    Refinement(
        _({"scalar-type-mismatch", "attention-dtype-mismatch"}), _({"flash_attn"}), "flash-attention-dtype"
    ),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"xformers"}),
        "attention-dtype-mismatch",
        note="raised inside xformers attention: query, key and value disagree",
    ),
    Refinement(
        _({"norm-dtype-mismatch"}),
        _({"autocast"}),
        "autocast-half-conflict",
        note="a norm refused its parameters under autocast: the model's own dtype fights autocast's",
    ),
    Refinement(_({"scalar-type-mismatch"}), _({"autocast", "half-model"}), "autocast-half-conflict"),
    Refinement(
        _({"matmul-dtype-mismatch"}),
        _({"autocast"}),
        "autocast-half-conflict",
        note="autocast casts matmul inputs itself: a mismatch under it means something fights autocast",
    ),
    Refinement(_({"scalar-type-mismatch"}), _({"loss"}), "loss-dtype-mismatch"),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"matmul-call"}),
        "matmul-dtype-mismatch",
        roles=(("expected", "left"), ("found", "right")),
    ),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"op-conv"}),
        "conv-weight-dtype-mismatch",
        roles=(("expected", "input"), ("found", "weight")),
    ),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"op-norm"}),
        "norm-dtype-mismatch",
        roles=(("expected", "input/weight"), ("found", "bias")),
    ),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"engine-spelling", "autograd"}),
        "loss-dtype-mismatch",
        note="the autograd engine's gradient dtype check, raised in backward(): a loss or its target",
    ),
    Refinement(
        _({"scalar-type-mismatch"}),
        _({"dtype-int64"}),
        "loss-dtype-mismatch",
        note="an int64 tensor against a floating one: most often integer labels meeting a loss",
    ),
    Refinement(_({"half-unsupported-kernel"}), _({"mps"}), "mps-dtype-unsupported"),
)

# Facts about the machine explain runs on (`explaining.environment`): only when the text left the
# family open (no refinement above applied). A log is usually from another machine: these are
# tie-breakers, shown as environment evidence, at confidence 0.6 at most.
ENV_REFINEMENTS: tuple[Refinement, ...] = (
    FLOAT8_OPERAND,
    Refinement(
        _({"scalar-type-mismatch", "norm-dtype-mismatch"}),
        _({"env-apex"}),
        "apex-conflict",
        note="NVIDIA apex is installed here: its fused kernels are the usual cause of this bare text",
    ),
    Refinement(
        _({"scalar-type-mismatch", "norm-dtype-mismatch"}),
        _({"env-oneflow", "autocast"}),
        "oneflow-infer-dtype",
        note="OneFlow/OneDiff installed here and torch autocast in the text",
    ),
    Refinement(
        _({"half-unsupported-kernel", "matmul-dtype-mismatch"}),
        _({"env-no-bf16", "dtype-bfloat16"}),
        "bf16-unsupported-hardware",
        note="this machine's GPU has no bf16",
    ),
)

__all__ = ["CONTEXT_SIGNALS", "ENV_REFINEMENTS", "REFINEMENTS"]
