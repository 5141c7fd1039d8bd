"""Families of mixed-precision runtime errors: texts, causes, fixes. Data only.

Every regex here runs only on lines that contain one of its `needles` (see MessagePattern);
keep them linear: bounded repeats, no nested quantifiers.

Names a fix may use (filled by the producer, placeholders otherwise): {module} the call that
failed (`self.linear_1`), {tensor} the argument it got (`sample`), {dtype} the dtype of the
model's parameters (`torch.float16`), {other_dtype} the odd operand's dtype.

Context tags that rank fixes (set by explain from the traceback and the log, see context.py):
multi-error (several different dtype mismatches in one run), inference, training, distributed,
autocast, input-fp32 / input-low (the activation is fp32 / fp16-bf16), vae, apex, oneflow,
deepspeed, gradscaler, cuda, windows...
"""

from __future__ import annotations

from ..remedies.places import BIRTH, OP
from .model import Family, FixTemplate, MessagePattern

_ = frozenset

# A dtype spelling inside a message: Float, c10::Half, struct c10::Half, torch.cuda.HalfTensor,
# CUDABFloat16Type, torch.float16, kFloat16... (dtypes.canonical names it).
INTEGER_STORE = frozenset({"integer-store"})  # floats written into an integer destination (findings)
DT = r"(?:(?:struct|class) |long |unsigned |signed )?[\w:.]{1,40}"

# torch < 1.0 legacy tensor types and torch 1.0-1.4 backends: one text is a dtype mismatch or a device
# mismatch depending on which part differs (scalar-type-mismatch and device-mismatch share them)
LEGACY_TYPES = (
    r"\bexpected (?:type )?(?P<expected>(?:torch\.)?(?:cuda\.)?\w{1,20}Tensor) but (?:got|found) "
    r"(?P<found>(?:torch\.)?(?:cuda\.)?\w{1,20}Tensor)"
)


def _backends(first: str, second: str) -> str:
    return rf"\bexpected backend (?P<b1>\w+) and dtype (?P<{first}>{DT}) but got backend (?P<b2>\w+) and dtype (?P<{second}>{DT})"


# ---- fixes shared by several families (one text, many families: no copy-paste) -----------------

ONE_POLICY = FixTemplate(
    "Choose one dtype policy for the whole model and apply it everywhere",
    "model = model.to({dtype})   # one call, one dtype, after loading\n"
    "# keep fp32 only where you decide to, and cast at that boundary",
    "Several different dtype mismatches in one run mean modules disagree: some call .float(), "
    "some keep fp16. Patching each op moves the error to the next one.",
    when=_({"multi-error"}),
)
CAST_AT_SEAM = FixTemplate(
    "Cast at the seam: give '{module}' its own dtype where the data enters it",
    "{tensor} = {tensor}.to({dtype})   # where it enters {module}",
    "A dtype check at the points where modules exchange data (cast automatically or warn) "
    "stops a stray fp32/fp16 tensor from reaching the op.",
    unless=_({"dtype-float8"}),  # never cast an activation to float8 to match a stored weight
)
DEQUANT_FLOAT8 = FixTemplate(
    "A float8 operand: dequantize it to the compute dtype first (float8 is a storage format)",
    "w = w_fp8.to(torch.bfloat16) * w_scale   # its scale, if it was quantized with one\n"
    "y = torch.nn.functional.linear(x.to(torch.bfloat16), w)\n"
    "# or torch._scaled_mm on float8 operands with explicit scales (sm89+), or torchao's float8 Linear",
    "PyTorch has no plain matmul or promotion between float8 and another dtype; ComfyUI/diffusers "
    "fp8 checkpoints are meant to be upcast per layer (weight-only fp8), not run in float8.",
    when=_({"dtype-float8"}),
)
CREATE_WITH_DTYPE = FixTemplate(
    "Give every tensor you create an explicit dtype (and device) taken from the model",
    "{tensor} = {made_op}(..., dtype={dtype})   # not {made_op}(...) without dtype=\n"
    "# or torch.zeros_like(t) of a model tensor t, which inherits its dtype and device",
    "torch.ones/zeros/randn/arange/linspace default to float32; one fp32 mask or timestep "
    "concatenated with fp16 tensors silently promotes everything after it to fp32.",
    unless=_({"inference", "dtype-float8"}),
)
FROM_FLOAT64 = FixTemplate(
    "Convert the float64 data where it enters: NumPy arrays and Python-float math give torch.float64",
    "{array} = torch.from_numpy({array}).to({dtype})   # or {array}.astype(np.float32) before\n"
    "# values from Python floats: torch.as_tensor(values, dtype={dtype}), not torch.tensor(values)",
    "torch.from_numpy keeps NumPy's float64; every model weight is float32 or lower, so the first "
    'layer refuses it ("Double and Float").',
    when=_({"fp64"}),
)
AUTOCAST_INFERENCE = FixTemplate(
    "Run inference under autocast, which casts each op's inputs for you",
    'with torch.autocast("{device}", dtype={dtype}), torch.no_grad():\n'
    "    out = model(**inputs)   # or model.generate(...) / model.chat(...)",
    "Autocast picks the dtype per op, so an fp32 input meeting fp16 weights is cast at the matmul.",
    when=_({"inference"}),
    unless=_({"multi-error", "autocast", "input-int"}),
)
LOAD_FP32 = FixTemplate(
    "Load the model in float32 if memory allows",
    "model = model.float()   # a pretrained model: from_pretrained(path, torch_dtype=torch.float32)",
    "Doubles the memory of the weights but removes every fp16/fp32 seam; keep an eye on GPU memory.",
    unless=_({"multi-error"}),
)
ONE_PRECISION_RUN = FixTemplate(
    "Run the whole model in one precision (e.g. the launcher's --fp16 flag, or model.half())",
    "model = model.to({dtype})   # every parameter, biases included\n"
    "# a launcher with precision flags: pass the same --fp16/--bf16 to every rank",
    "The input was converted to half but some parameters (biases) stayed float32: the model "
    "was only half-converted, or the run flags and the model config disagree.",
    when=_({"input-low"}),
    unless=_({"multi-error", "autocast"}),
)
FRAGILE_FP32 = FixTemplate(
    "Keep numerically fragile layers in float32 deliberately, casting at their boundary",
    why="fp32 norms/embeddings are fine when chosen on purpose and cast at the seam, not by accident "
    "(transformers: the model's _keep_in_fp32_modules).",
    build="keep_module",
    when=_({"input-low"}),
    unless=_({"multi-error"}),
)
TEST_PER_HARDWARE = FixTemplate(
    "Test precision and speed on each target GPU (V100 has no bf16; fp16 may need fp32 layers)",
    "dtype-doctor compare model.py:build --input 1x3x224x224",
    when=_({"input-low", "distributed"}),
    unless=_({"multi-error"}),
)
UNIFORM_DTYPE_CHECK = FixTemplate(
    "Add an explicit dtype check where modules exchange data",
    'assert {tensor}.dtype == {dtype}, f"{{{tensor}.dtype}} reaches {module}"',
    "Fails at the seam with a message that names both sides, instead of deep inside an op.",
)
NATIVE_AMP = FixTemplate(
    "Use PyTorch native AMP (torch.autocast + torch.amp.GradScaler) instead of apex.amp",
    'with torch.autocast("{device}", dtype=torch.float16):\n    loss = model(x)\nscaler.scale(loss).backward()',
)

# a number the destination dtype cannot hold: the statements are written by watching/value_limits.py
LIMIT_AT_BIRTH = FixTemplate(
    "Set `{value}` to the limit of the dtype it is written into, where it is set ({born})",
    "{born_fix}",
    "`{value}` is {number}, the limit of another dtype: {target} ends at {target_max}. "
    "torch.finfo of the destination's dtype gives the largest magnitude that dtype holds, "
    "whatever the model runs in.",
    when=_({"value-born"}),
    needs=("born_fix",),
    place=BIRTH,
)
LIMIT_AT_USE = FixTemplate(
    "Use the destination dtype's own limit instead of {number} {at}",
    "{limited}",
    "{target} ends at {target_max}; torch.finfo({dest}) gives the largest magnitude the "
    "destination holds (a mask's stand-in for -inf), and follows the model's dtype if it changes.",
    when=_({"value-limit"}),
    needs=("limited",),
    place=OP,
)


# What the log scanner looks for in one pass: every pattern needle contains one of these (a needle
# that contains none is scanned for itself). Fewer, shorter triggers make the scan of a 50 MB log
# cheaper; the needles then pick the candidate lines' patterns.
# Triggers are lower-case and searched in the lower-cased raw text, before the view canonicalises
# dtype spellings: they avoid dtype names (`Half`, `c10::Half` and `fp16` must all be found), except
# `fp16`/`bf16`/`bfloat16`, which find the lines whose needles read `float16`/`bfloat16` in the view.
TRIGGERS: tuple[str, ...] = (
    "dtype", "scalar type", "type (", "same type", "device type", "type for target", "output type",
    "inferdatatype", "scalartype", "nan", "=inf", ": inf", "overflow", "_status_", "fp16", "bf16", "bfloat16", "not implemented for",
    "mat2", "m1 and m2", "loss scale", "lr_scheduler", "skipping step", "invalid ", "architecture",
    "find an engine", "is_sm", "flashattention", "no operator found", "is undefined", "pyramid",
    "no module named '", "__half", "mps tensor", "mps backend", "autocast", "fused=true", "input contains",
    "tensor but", "tensor)", "same device", "is on cpu", "cannot be converted", "check failed", ".vs ",
    "nvrtc", "default_program", "are supported", "bitsandbytes", "unscale", "quantized model", "'apex'",
    "_scale", "grad scale", "skipped iterations", "float8", "expected key", "expected query", "expected value",
    "expected attn_mask",
)  # fmt: skip

ERROR_FAMILIES: tuple[Family, ...] = (
    Family(
        code="matmul-dtype-mismatch",
        title="Matrix multiply operands have different dtypes",
        cause=(
            "A matrix multiply (nn.Linear, mm, bmm, baddbmm, @) got operands of two dtypes: usually an "
            "fp32 activation reaching fp16/bf16 weights (or the reverse). PyTorch never casts the "
            "operands of a matmul for you outside autocast."
        ),
        patterns=(
            MessagePattern(
                rf"\b(?:expected )?mat1 and mat2 (?:must have|to have) the same dtype(?:, but got:? (?P<input>{DT}) (?:and|!=) (?P<weight>{DT})\s*$)?",
                note="F.linear with bias / addmm: mat1 is the input, mat2 the weight",
                needles=("mat1 and mat2",),
            ),
            MessagePattern(
                rf"\bself and mat2 must have the same dtype(?:, but got (?P<bias>{DT}) and (?P<weight>{DT}))?",
                note="F.linear / addmm: 'self' is the bias, mat2 the weight",
                needles=("self and mat2",),
            ),
            MessagePattern(
                rf"\bexpected m1 and m2 to have the same dtype, but got: (?P<m1>{DT}) != (?P<m2>{DT})",
                roles=(("m1", "input"), ("m2", "weight")),
                roles_if=(("matmul-call", (("m1", "left"), ("m2", "right"))),),
                note="F.linear without bias, torch.mm, @ (2-D): m1 is the input, m2 the weight",
                needles=("m1 and m2",),
            ),
            MessagePattern(
                rf"\bInput dtypes must be the same, got: input:? (?P<input>{DT}), batch1: (?P<batch1>{DT}), batch2: (?P<batch2>{DT})",
                note="baddbmm / addbmm (attention scores in many models)",
                needles=("Input dtypes must be the same",),
            ),
            MessagePattern(
                rf"\b(?:dot : )?expected both vectors to have same dtype, but found (?P<left>{DT}) and (?P<right>{DT})",
                note="torch.dot / 1-D matmul",
                needles=("expected both vectors to have same dtype",),
            ),
            MessagePattern(
                rf"\bexpected object of scalar type (?P<expected>{DT}) but got scalar type (?P<found>{DT}) for argument #\d+ '(?P<arg>mat1|mat2|m1|m2|batch1|batch2|vec|vec2|self)'",
                info=("arg",),
                note="torch < 1.5: the TH check of addmm/mm/bmm names the matmul argument",
                needles=("scalar type",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bCUBLAS_STATUS_INVALID_VALUE when calling `?cublas(?:Gemm|LtMatmul)",
                note="cuBLAS refused the dtype combination of a GEMM",
                needles=("CUBLAS_STATUS_",),
                confidence=0.6,
            ),
        ),
        fixes=(
            DEQUANT_FLOAT8,
            FROM_FLOAT64,
            ONE_POLICY,
            AUTOCAST_INFERENCE,
            CAST_AT_SEAM,
            CREATE_WITH_DTYPE,
            LOAD_FP32,
            UNIFORM_DTYPE_CHECK,
        ),
        related=("scalar-type-mismatch", "autocast-half-conflict"),
        keywords=(
            "mat1",
            "mat2",
            "matmul",
            "addmm",
            "bmm",
            "gemm",
            "cublas",
            "linear layer",
            "nn.linear",
            "f.linear",
        ),
    ),
    Family(
        code="scalar-type-mismatch",
        title="An op expected one scalar type and found another",
        cause=(
            "A kernel checked that all its tensors share the dtype of the first one and found "
            "another: the generic PyTorch check behind bmm, conv without bias, norms with mixed "
            "weight/bias, custom CUDA extensions (apex, flash-attn, quantization kernels). The "
            "frames above the message tell which op it was."
        ),
        patterns=(
            MessagePattern(
                rf"\b[Ee]xpected (?:object of )?scalar type (?P<expected>{DT}) but (?:found|got) (?:scalar type )?(?P<found>{DT})",
                note="TORCH_CHECK in TensorIterator/ScalarType checks; bmm, conv (no bias), norms, extensions",
                needles=("scalar type",),
                confidence=0.6,
            ),
            MessagePattern(
                rf"\bexpected dtype (?P<expected>{DT}) for (?P<arg>\w+),? but got (?:dtype )?(?P<found>{DT})",
                note="lerp and other binary kernels (Adam's exp_avg.lerp_)",
                needles=("expected dtype",),
                info=("arg",),
                confidence=0.6,
            ),
            MessagePattern(
                LEGACY_TYPES,
                note="torch < 1.0 spelling (legacy tensor types); a device mismatch when only cuda. differs",
                needles=("tensor but",),
                confidence=0.5,
                tags=("engine-spelling",),
            ),
            MessagePattern(
                rf"\bexpected dtype (?P<expected>{DT}) but got dtype (?P<found>{DT})",
                note="a gradient's dtype check (autograd engine) when it names no argument",
                needles=("expected dtype",),
                confidence=0.55,
                tags=("engine-spelling",),
            ),
            MessagePattern(
                _backends("expected", "found"),
                info=("b1", "b2"),
                note="torch 1.0-1.4 spelling",
                needles=("and dtype",),
                confidence=0.6,
            ),
            MessagePattern(
                rf"\bExpected tensor for argument #\d+ '(?P<arg1>\w+)' to have the same type as tensor for argument #\d+ '(?P<arg2>\w+)'; but type (?P<first>{DT}) does not equal (?P<second>{DT})",
                info=("arg1", "arg2"),
                note="older torch: the TensorArg check (embedding_bag, cudnn rnn, batch_norm...)",
                needles=("to have the same type as tensor for argument",),
                confidence=0.5,
            ),
            MessagePattern(
                rf"\bmasked_fill_? only supports boolean masks, but got mask with dtype (?P<mask>{DT})",
                info=("mask",),
                note="masked_fill with a float/int mask (an attention mask built in the model's dtype)",
                needles=("with dtype",),
                confidence=0.6,
            ),
            MessagePattern(
                r"\bExpected all tensors to have the same dtype",
                needles=("to have the same dtype",),
                confidence=0.5,
            ),
        ),
        fixes=(
            FROM_FLOAT64,
            ONE_POLICY,
            AUTOCAST_INFERENCE,
            CAST_AT_SEAM,
            CREATE_WITH_DTYPE,
            UNIFORM_DTYPE_CHECK,
        ),
        related=("matmul-dtype-mismatch", "norm-dtype-mismatch", "apex-conflict"),
        keywords=("scalar type", "dtype mismatch", "expected scalar type"),
    ),
    Family(
        code="index-dtype",
        title="Indices or token ids have a floating dtype",
        cause=(
            "An embedding or indexing op got float16/float32 indices. This is what a blanket "
            "`.half()`/`.to(torch.float16)` over a whole batch does: it casts the token ids "
            "(input_ids, positions, labels) along with the pixel values or features."
        ),
        patterns=(
            MessagePattern(
                rf"\bExpected tensor for argument #\d+ '(?P<arg>\w+)' to have one of the following scalar types: (?P<allowed>[\w, ]{{1,40}}); but got (?P<found>{DT}) instead",
                info=("arg", "allowed"),
                roles=(("found", "indices"),),
                note="embedding indices cast to half with the rest of the inputs (token ids must stay integer)",
                needles=("to have one of the following scalar types",),
                confidence=0.8,
            ),
        ),
        fixes=(
            FixTemplate(
                "Cast only floating-point inputs: token ids and indices must stay integer",
                "inputs = {{k: v.to({dtype}) if v.is_floating_point() else v for k, v in inputs.items()}}",
                "Only pixel values, features and embeddings follow the model's dtype; ids stay int64.",
            ),
            FixTemplate(
                "Give index tensors an integer dtype where they are made",
                "input_ids = input_ids.long()",
            ),
        ),
        related=("scalar-type-mismatch",),
        keywords=("indices", "embedding", "input_ids", "token ids"),
    ),
    Family(
        code="conv-weight-dtype-mismatch",
        title="Convolution input and weight have different dtypes",
        cause=(
            "A convolution got an input of one dtype and a weight of another: typically fp32 "
            "latents or images reaching an fp16 model (or the reverse) while sampling or "
            "pre-processing."
        ),
        patterns=(
            MessagePattern(
                rf"\bInput type \((?P<input>{DT})\) and weight type \((?P<weight>{DT})\) should be the same",
                note="conv on CUDA (torch.cuda.HalfTensor spelling) and CPU MKLDNN paths",
                needles=("weight type (",),
            ),
            MessagePattern(
                rf"\bExpected tensor for argument #\d+ '(?:input|self)' to have the same type as tensor for argument #\d+ 'weight'; but type (?P<input>{DT}) does not equal (?P<weight>{DT}) \(while checking arguments for \w*conv",
                note="older torch: the TensorArg check of cudnn/thnn convolution",
                needles=("to have the same type as tensor for argument",),
            ),
        ),
        fixes=(
            FROM_FLOAT64,
            ONE_POLICY,
            AUTOCAST_INFERENCE,
            CAST_AT_SEAM,
            CREATE_WITH_DTYPE,
            LOAD_FP32,
        ),
        related=("conv-bias-dtype-mismatch",),
        keywords=("conv", "conv1d", "conv2d", "conv3d", "weight type", "convolution"),
    ),
    Family(
        code="conv-bias-dtype-mismatch",
        title="Convolution input and bias have different dtypes",
        cause=(
            "A convolution got an input of one dtype and a bias of another. PyTorch checks the "
            "bias first on every device, so this text also appears when the weight is the odd "
            "one. Input half + bias float: the model was only partly converted to half. "
            "Input float + bias half: an fp32 tensor (latents, a mask, an image) reached an fp16 model."
        ),
        patterns=(
            MessagePattern(
                rf"\bInput type \((?P<input>{DT})\) and bias type \((?P<bias>{DT})\) should be the same",
                note="conv*d, conv_transpose*d: bias is checked before the backend",
                needles=("bias type (",),
            ),
        ),
        fixes=(
            FROM_FLOAT64,
            ONE_POLICY,
            ONE_PRECISION_RUN,
            FRAGILE_FP32,
            TEST_PER_HARDWARE,
            FixTemplate(
                "Decode with the VAE's own dtype (cast the latents), or upcast the VAE to float32",
                "latents = latents.to(vae.dtype)\nimage = vae.decode(latents / vae.config.scaling_factor)"
                "\n# or: vae.to(torch.float32) when fp16 decoding gives NaNs/black images",
                when=_({"vae"}),
                unless=_({"multi-error"}),
            ),
            CAST_AT_SEAM,
            CREATE_WITH_DTYPE,
        ),
        related=("conv-weight-dtype-mismatch",),
        keywords=("bias type", "conv bias"),
    ),
    Family(
        code="norm-dtype-mismatch",
        title="Normalisation input and parameters have different dtypes",
        cause=(
            "A LayerNorm/GroupNorm/BatchNorm/RMSNorm got an input and weight/bias of different "
            "dtypes. On CPU an fp16/bf16 input with fp32 parameters is allowed, the reverse (fp32 "
            "input, fp16 parameters) is not; 'mixed dtype (CPU)' says exactly that, and also appears "
            "when fp16 parameters meet a bf16 input under autocast."
        ),
        patterns=(
            MessagePattern(
                r"\bmixed dtype \((?P<device>CPU|CUDA)\): (?:expect|all) (?:parameter|inputs?) (?:to have|must share) (?:the )?(?:same )?(?:scalar type|data ?type|dtype)(?: of (?P<expected>\w+))?",
                roles=(("expected", "parameters (required)"),),
                info=("device",),
                note="native layer_norm / group_norm / batch_norm on CPU",
                needles=("mixed dtype (",),
            ),
            MessagePattern(
                r"\bMismatch dtype between input and weight: input dtype = (?P<input>[\w:]+), weight dtype = (?P<weight>[\w:]+)",
                note="rms_norm warning: falls back to the unfused path",
                needles=("Mismatch dtype between input and weight",),
                confidence=0.7,
            ),
        ),
        fixes=(
            FROM_FLOAT64,
            ONE_POLICY,
            FixTemplate(
                "Keep the norm in float32 on purpose and cast around it",
                why="Norms are numerically fragile; fp32 parameters with fp16/bf16 input are the usual "
                "choice, fp16 parameters with fp32 input are refused on CPU.",
                build="keep_module",
            ),
            CAST_AT_SEAM,
            CREATE_WITH_DTYPE,
        ),
        related=("autocast-half-conflict", "apex-conflict"),
        keywords=(
            "layer_norm",
            "group_norm",
            "layernorm",
            "groupnorm",
            "rmsnorm",
            "batch_norm",
            "batchnorm",
            "layer norm",
            "batch norm",
            "group norm",
        ),
    ),
    Family(
        code="attention-dtype-mismatch",
        title="Attention query, key, value or mask have different dtypes",
        cause=(
            "scaled_dot_product_attention needs query, key and value of one dtype, and a mask that "
            "is bool, float32 or the query's dtype. Usually encoder_hidden_states (text "
            "embeddings) or a mask were made in fp32 while the model runs in fp16/bf16."
        ),
        patterns=(
            MessagePattern(
                rf"\bExpected query, key,? and value to have the same dtype, but got query\.dtype: (?P<query>{DT}),? key\.dtype: (?P<key>{DT}),? and value\.dtype: (?P<value>{DT})",
                note="F.scaled_dot_product_attention",
                needles=("query.dtype",),
            ),
            MessagePattern(
                rf"\bExpected attn_mask dtype to be bool(?: or float32)? or to match query dtype(?:, but got attn_mask\.dtype: (?P<mask>{DT})(?: and\s+query\.dtype: (?P<query>{DT}))?)?",
                note="F.scaled_dot_product_attention mask",
                needles=("attn_mask dtype",),
            ),
            MessagePattern(
                r"\bQuery/Key/Value should (?:either )?all have the same dtype",
                note="xformers memory_efficient_attention (fmha) input check",
                needles=("all have the same dtype",),
            ),
            MessagePattern(
                r"\bonly bool and floating types of (?:key_padding_mask|attn_mask|mask) are supported",
                note="nn.MultiheadAttention / F.multi_head_attention_forward masks",
                needles=("are supported",),
            ),
            MessagePattern(
                r"\bExpected (?:key_padding_mask|attn_mask|query|key|value)[^\n]{0,60}? dtype",
                note="attention input checks",
                needles=(
                    "expected key_padding_mask",
                    "expected attn_mask",
                    "expected query",
                    "expected key",
                    "expected value",
                ),
                confidence=0.6,
            ),
        ),
        fixes=(
            ONE_POLICY,
            FixTemplate(
                "Give the attention inputs (encoder_hidden_states, the mask) the model's dtype",
                "encoder_hidden_states = encoder_hidden_states.to({dtype})\n"
                "attn_mask = attn_mask.to({dtype})  # or a bool mask",
            ),
            AUTOCAST_INFERENCE,
            CREATE_WITH_DTYPE,
        ),
        related=("flash-attention-dtype",),
        keywords=(
            "attn_mask",
            "attention mask",
            "sdpa",
            "scaled_dot_product_attention",
            "query",
            "key_padding_mask",
            "multiheadattention",
        ),
    ),
    Family(
        code="flash-attention-dtype",
        title="Flash/memory-efficient attention needs fp16 or bf16 inputs",
        cause=(
            "flash-attn, xformers' memory-efficient kernels and PyTorch's flash SDPA backend only "
            "run on fp16/bf16 query/key/value (of one dtype, on a supported GPU); fp32 inputs or a "
            "mix find no kernel."
        ),
        patterns=(
            MessagePattern(
                r"\bFlashAttention only supports? (?:float16|bfloat16) and (?:float16|bfloat16) data type",
                needles=("FlashAttention only support",),
            ),
            MessagePattern(
                r"\b(?:query and key|query and value) must have the same dtype",
                note="flash_attn_cuda",
                needles=("must have the same dtype",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bFlashAttention only supports Ampere GPUs or newer|\bExpected is_sm(?:8x|80|90)(?: \|\| is_sm\w+)* to be true",
                note="flash-attn on a GPU older than Ampere (or a head size its backward does not cover there)",
                needles=("FlashAttention only supports Ampere", "Expected is_sm"),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bNo operator found for `?memory_efficient_attention_\w+`? with inputs",
                note="xformers dispatch",
                needles=("No operator found for",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bExpected query, key and value to all be of dtype: \{(?P<supported>[\w, ]{1,60})\}\. Got Query dtype: (?P<query>[\w:]+), Key dtype: (?P<key>[\w:]+), and Value dtype: (?P<value>[\w:]+)",
                info=("supported",),
                note="PyTorch SDPA flash/efficient backend selection",
                needles=("to all be of dtype",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Run attention in fp16/bf16: cast query/key/value (or the model) to one half dtype",
                "q, k, v = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)",
            ),
            FixTemplate(
                "Or fall back to the math/SDPA path for fp32",
                "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
                "with sdpa_kernel(SDPBackend.MATH):\n    out = F.scaled_dot_product_attention(q, k, v)",
            ),
            AUTOCAST_INFERENCE,
        ),
        related=("attention-dtype-mismatch", "bf16-unsupported-hardware"),
        keywords=(
            "flash-attn",
            "flash_attn",
            "flash-attention",
            "flashattention",
            "flash attention",
            "xformers",
            "memory_efficient",
        ),
    ),
    Family(
        code="index-put-dtype-mismatch",
        title="Indexed assignment between different dtypes",
        cause=(
            "x[idx] = v, index_put_, index_add_, scatter_ and masked_scatter_ do not cast the "
            "source to the destination's dtype (plain copy_ does). An fp32 value written into an "
            "fp16 buffer (a KV cache, a mask) fails."
        ),
        patterns=(
            MessagePattern(
                rf"\bIndex put requires the source and destination dtypes match, got (?P<destination>{DT}) for the destination and (?P<source>{DT}) for the source",
                needles=("dtypes match",),
            ),
            MessagePattern(
                rf"\bindex_(?:add|copy|reduce)_?\(\): self \((?P<destination>{DT})\) and source \((?P<source>{DT})\) must have the same scalar type",
                needles=("must have the same scalar type",),
            ),
            MessagePattern(
                r"\bscatter(?:_add|_reduce)?\(\): Expected self\.dtype to be equal to src\.dtype",
                needles=("Expected self.dtype to be equal to src.dtype",),
            ),
            MessagePattern(
                rf"\bmasked_scatter_?: expected self and source to have same dtypes but got ?(?P<destination>{DT}) and (?P<source>{DT})",
                needles=("same dtypes",),
            ),
        ),
        fixes=(
            FixTemplate(  # the dtype read off the destination: it holds when that dtype changes
                "Cast `{tensor}` to the dtype of `{dest}`, the destination's, before the indexed write",
                "{tensor} = {tensor}.to({dest}.dtype)",
                "read off the destination, the cast holds on every call and loop iteration, whatever "
                "dtype the destination has then (a dtype literal holds only for the one seen here)",
                needs=("tensor", "dest"),
                unless=INTEGER_STORE,  # floats cast into an int8 cache are truncated: the store is odd
            ),
            FixTemplate(  # the value as the user's code names it, cast where it is written
                "Cast `{tensor}` to the destination's dtype before the indexed write",
                "{tensor} = {tensor}.to({dtype})",
                needs=("tensor", "dtype"),
                unless=INTEGER_STORE,
            ),
            FixTemplate(
                "Cast the value to the destination's dtype before the indexed write",
                "cache[idx] = value.to(cache.dtype)",
                unless=INTEGER_STORE,
            ),
            CREATE_WITH_DTYPE,
            ONE_POLICY,
        ),
        keywords=("index_put", "index put", "scatter", "index_add", "setitem"),
    ),
    Family(
        code="loss-dtype-mismatch",
        title="Loss inputs or targets have the wrong dtype",
        cause=(
            "Losses want fp32 (or fp16/bf16 under autocast) predictions and targets of the kind the "
            "loss expects: class indices as int64 for cross_entropy/nll_loss, floats for "
            "MSE/BCE. BCELoss is refused under autocast as numerically unsafe."
        ),
        patterns=(
            MessagePattern(
                r"\bbinary_cross_entropy and torch\.nn\.BCELoss are unsafe to autocast",
                needles=("unsafe to autocast",),
            ),
            MessagePattern(
                rf"\"(?P<kernel>nll_loss\w*|\w*cross_entropy\w*|\w*_loss\w*)\" not implemented for '(?P<target>{DT})'",
                info=("kernel",),
                needles=(" not implemented for '",),
            ),
            MessagePattern(
                rf"\bFound dtype (?P<found>{DT}) but expected (?P<expected>{DT})",
                note="autograd engine: a backward (a loss's, most often) returned a gradient of the wrong dtype",
                needles=("found dtype",),
                confidence=0.75,
            ),
            MessagePattern(
                rf"\bFunction \w+ returned an invalid gradient at index \d+ - expected (?:dtype |type )?(?P<expected>{DT}) but got (?:dtype )?(?P<found>{DT})",
                note="autograd engine (validate_outputs): a backward returned the wrong dtype",
                needles=("invalid gradient",),
                confidence=0.8,
            ),
            MessagePattern(
                rf"\bexpected object of scalar type (?P<expected>{DT}) but got scalar type (?P<target>{DT}) for argument #\d+ '(?:target|label|labels)'",
                note="torch < 1.5: nll_loss / cross_entropy target check",
                needles=("scalar type",),
                confidence=0.85,
            ),
            MessagePattern(
                rf"\bExpected floating point type for target with class probabilities, got (?P<target>{DT})",
                note="cross_entropy with probability targets",
                needles=("type for target",),
            ),
            MessagePattern(
                rf"\bexpected scalar type int64 but found (?P<target>{DT})",
                note="nll_loss / cross_entropy with a non-int64 target",
                needles=("scalar type int64",),
                confidence=0.7,
            ),
            MessagePattern(
                rf"\bresult type (?P<result>{DT}) can't be cast to the desired output type (?P<output>{DT})",
                needles=("can't be cast to the desired output type",),
                confidence=0.6,
            ),
        ),
        fixes=(
            FixTemplate(
                "Compute the loss in float32 on float32 predictions; targets as the loss expects",
                "loss = F.cross_entropy(logits.float(), target.long())\n"
                "loss = F.mse_loss(pred.float(), target.float())",
            ),
            FixTemplate(
                "Under autocast use BCEWithLogitsLoss (drop the sigmoid) instead of BCELoss",
                "loss = F.binary_cross_entropy_with_logits(logits, target)",
                when=_({"autocast"}),
            ),
        ),
        keywords=(
            "loss function",
            "labels",
            "target",
            "cross entropy",
            "cross_entropy",
            "nll_loss",
            "bce",
            "mse_loss",
            "criterion",
        ),
    ),
    Family(
        code="oneflow-infer-dtype",
        title="OneFlow type inference failed: two precision managers disagree",
        cause=(
            "OneFlow (OneDiff) compiled a graph in which an op expected float32 and got float16: "
            "the model is already in fp16 (.half()) AND runs under torch.autocast, so two "
            "precision managers from two frameworks fight; torch autocast decides some ops need "
            "fp32 while the OneFlow graph holds fp16 weights."
        ),
        patterns=(
            MessagePattern(
                rf"\bInferDataType Failed\.? Expected (?P<expected>{DT}), but got (?P<found>{DT})",
                needles=("InferDataType",),
            ),
            MessagePattern(
                r"\bInferDataType\b",
                needles=("InferDataType",),
                confidence=0.8,
            ),
            MessagePattern(
                rf"(?P<left>{DT}) \.vs (?P<right>{DT})",
                note="OneFlow CHECK_EQ output (`X .vs Y`)",
                needles=(".vs ",),
                confidence=0.7,
            ),
            MessagePattern(
                r"\bCheck failed: [^\n]{0,300}?(?:dtype|data_type|DataType|expected scalar type)",
                note="OneFlow / glog CHECK on a data type",
                needles=("check failed",),
                confidence=0.6,
            ),
            MessagePattern(
                r"\bexpected all \w{1,10} to have same type, but found (?P<left>\w+) and (?P<right>\w+)",
                note="OneFlow functional op type check",
                needles=("same type, but",),
                confidence=0.7,
            ),
        ),
        fixes=(
            FixTemplate(
                "Drop the redundant torch.autocast and keep the fp16 model",
                "pipe = pipe.to(torch.float16)     # already half\n"
                'images = pipe(prompt).images       # no `with torch.autocast("{device}")`',
                "The model is already fp16; torch autocast on top of a OneFlow graph only adds casts "
                "OneFlow's type inference refuses.",
            ),
            FixTemplate(
                "If you need mixed precision, use OneFlow's own autocast instead of torch's",
                'import oneflow as flow\nwith flow.autocast("cuda"):\n    images = pipe(prompt).images',
            ),
            FixTemplate(
                "Never mix precision tools of two frameworks; measure the throughput of both options "
                "on the target GPU and watch gradient stability when training",
                "dtype-doctor compare ...",
            ),
        ),
        related=("autocast-half-conflict",),
        keywords=("oneflow", "onediff", "inferdatatype"),
    ),
    Family(
        code="half-unsupported-kernel",
        title="This kernel has no float16/bfloat16 implementation on this device",
        cause=(
            "The op has no {dtype} kernel for this device/build: old PyTorch CPU builds lacked "
            "Half kernels (addmm_impl_cpu_, LayerNormKernelImpl, slow_conv2d_cpu), some CUDA "
            "kernels lack BFloat16 on older GPUs."
        ),
        patterns=(
            MessagePattern(
                r"\"?(?P<kernel>[\w:]{1,80})\"? (?:is )?not implemented for '?(?P<dtype>float16|bfloat16|complex32|float8_\w+)\b",
                info=("kernel",),
                needles=(
                    "not implemented for 'float16'",
                    "not implemented for 'bfloat16'",
                    "not implemented for float16",
                    "not implemented for bfloat16",
                    "not implemented for 'complex32'",
                    "not implemented for 'Float8",
                ),
            ),
            MessagePattern(
                r"\bCUBLAS_STATUS_NOT_SUPPORTED\b(?:[^\n]{0,40}?when calling `?cublas\w{0,40}\([^\n]{0,400}?\b(?P<dtype>float16)\b)?",
                note="cuBLAS has no GEMM for these half types on this GPU (fp16 GEMM needs sm53+; tensor-op "
                "algorithms and cublasLt need newer GPUs and a matching CUDA/cuBLAS)",
                needles=("CUBLAS_STATUS_NOT_SUPPORTED",),
                confidence=0.6,
            ),
            MessagePattern(
                r"\bGot unsupported ScalarType (?P<dtype>bfloat16|float8\w*|complex32)",
                note="Tensor.numpy() / NumPy conversion: NumPy has no bfloat16",
                needles=("unsupported scalartype",),
                confidence=0.7,
            ),
        ),
        fixes=(
            FixTemplate(
                "Run this model in float32 on this device (fp16/bf16 belongs on the GPU)",
                "model = model.float()",
                unless=_({"cuda"}),
            ),
            FixTemplate(
                "Upgrade PyTorch: CPU fp16 coverage grew a lot up to 2.6 (x86 FP16 support)",
                "pip install -U torch",
            ),
            FixTemplate(
                "Or keep just this op in float32",
                "y = op({tensor}.float()).to({dtype})",
            ),
        ),
        related=("bf16-unsupported-hardware", "mps-dtype-unsupported"),
        keywords=("not implemented", "kernel", "on cpu"),
    ),
    Family(
        code="fp16-gradient-unscale",
        title="GradScaler was given float16 parameters",
        cause=(
            "GradScaler refuses to unscale fp16 gradients: mixed precision training needs fp32 "
            "master parameters. The model was cast with .half() (or loaded in fp16) and then "
            "trained with autocast + GradScaler."
        ),
        patterns=(
            MessagePattern(
                r"\bAttempting to unscale float16 gradients",
                needles=("unscale float16 gradients",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Keep the trained parameters in float32 where they were made float16 ({born})",
                "{born_fix}",
                "GradScaler and the optimizer need float32 master weights; the frozen ones can stay "
                "float16. A module that mixes them casts its input to its trained weights' dtype and "
                "its output back (as peft's and diffusers' cast_training_params expect).",
                when=_({"trainable-born"}),
                needs=("born_fix",),
                place=BIRTH,
            ),
            FixTemplate(
                "Keep the parameters in float32 and let autocast run the ops in fp16",
                "model = model.float()            # no model.half() when training with GradScaler\n"
                'with torch.autocast("{device}", dtype=torch.float16):\n    loss = model(x)\n'
                "scaler.scale(loss).backward()",
            ),
            FixTemplate(
                "Or train in bf16 without a scaler",
                'with torch.autocast("{device}", dtype=torch.bfloat16):\n    loss = model(x)\nloss.backward()',
            ),
            FixTemplate(
                "With DeepSpeed/accelerate, let the framework own fp16 (fp16: enabled) instead of .half()",
                'accelerator = Accelerator(mixed_precision="fp16")',
                when=_({"deepspeed"}),
            ),
        ),
        related=("grad-scaler-overflow",),
        keywords=("gradscaler", "unscale", "float16 gradients"),
    ),
    Family(
        code="grad-scaler-overflow",
        title="Loss scaler found inf/NaN gradients and skipped steps",
        severity="warning",
        cause=(
            "The dynamic loss scaler saw inf/NaN gradients, skipped the optimizer step and lowered "
            "the scale. A few skips early on are normal; many in a row (or the scale reaching its "
            "minimum) mean fp16 overflows in the forward or backward pass."
        ),
        patterns=(
            MessagePattern(
                r"\bOVERFLOW!\s+Rank \d+ Skipping step",
                note="DeepSpeed fp16 loss scaler",
                needles=("OVERFLOW!",),
            ),
            MessagePattern(
                r"\bGradient overflow\.\s+Skipping step",
                note="apex / Megatron loss scaler",
                needles=("Gradient overflow",),
            ),
            MessagePattern(
                r"\b(?:Current loss scale already at minimum|Minimum loss scale reached)",
                needles=("loss scale already at minimum", "Minimum loss scale reached"),
            ),
            MessagePattern(
                r"\bOverflow detected\.? Skipping step|\bAttempted loss scale: [\d.e+-]{1,12}, reducing to|\bGrad overflow on iteration",
                note="DeepSpeed fp16 optimizer",
                needles=("skipping step", "attempted loss scale", "grad overflow on"),
            ),
            MessagePattern(
                r"\b(?:loss|grad(?:ient)?)[_ ]?scale\b['\"]?\s{0,3}[:=]\s{0,3}(?P<scale>0(?:\.0{1,20})?|0\.000\d{1,20}|\d(?:\.\d{1,20})?e-(?:0?[5-9]|[1-9]\d{1,2}))(?![\d.])",
                info=("scale",),
                note="a dynamic loss scale at (or next to) zero: every step overflowed",
                needles=(
                    "loss_scale",
                    "loss scale",
                    "grad_scale",
                    "grad scale",
                    "gradient_scale",
                ),
                confidence=0.75,
            ),
            MessagePattern(
                r"\bnumber of skipped iterations:\s{0,3}[1-9]\d{0,8}",
                note="Megatron-LM's iteration line: steps skipped for inf/NaN gradients",
                needles=("skipped iterations",),
                confidence=0.6,
            ),
            MessagePattern(
                r"\bgradient overflow detected, ignoring gradient",
                note="fairseq",
                needles=("gradient overflow detected",),
            ),
            MessagePattern(
                r"\bDetected call of lr_scheduler\.step\(\) before optimizer\.step\(\)",
                note="also printed when GradScaler skips the very first step",
                needles=("Detected call of lr_scheduler.step()",),
                confidence=0.4,
            ),
        ),
        fixes=(
            FixTemplate(
                "Find the layer that overflows and keep it in float32 (or switch to bf16)",
                "dtype-doctor numerics model.py:build --input 8x3x64x64:float16",
            ),
            FixTemplate(
                "Lower the initial scale / raise the scale window",
                "scaler = torch.amp.GradScaler(init_scale=2.**10, growth_interval=2000)",
            ),
        ),
        related=("nonfinite-values", "fp16-gradient-unscale"),
        keywords=("skipping step", "loss scale", "grad scale", "scaler", "overflow"),
    ),
    Family(
        code="nonfinite-values",
        title="NaN or inf values appeared",
        severity="warning",
        cause=(
            "NaN/inf appeared in the activations, the loss or the output: fp16 overflows above "
            "65504 (attention scores, VAE decoder, large activations), or underflows to 0 and is "
            "then divided by. Black images and 'invalid value encountered in cast' are the "
            "diffusion faces of it."
        ),
        patterns=(
            MessagePattern(
                r"\bprobability tensor contains either inf, nan or element < 0",
                note="generate()/multinomial sampling from fp16 logits",
                needles=("either inf, nan",),
                confidence=0.9,
            ),
            MessagePattern(
                r"\bFunction '(?P<fn>\w+)' returned nan values in its \d+th output",
                info=("fn",),
                note="torch.autograd.detect_anomaly",
                needles=("returned nan values",),
            ),
            MessagePattern(
                r"\bRuntimeWarning: invalid value encountered in cast",
                note="diffusers numpy_to_pil on NaN images (black images)",
                needles=("invalid value encountered in cast",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bA tensor with all NaN'?s was produced in \w+",
                note="stable-diffusion-webui NansException (fp16 UNet/VAE)",
                needles=("tensor with all nan",),
            ),
            MessagePattern(
                r"\bNaN or Inf found in input tensor",
                note="tensorboard(X) logging a non-finite scalar",
                needles=("nan or inf found",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bDetected inf/nan during batch_number=\d+",
                note="transformers DebugUnderflowOverflow",
                needles=("Detected inf/nan",),
            ),
            MessagePattern(
                r"\b(?:\w{1,20}_)?[Ll]oss\b.{0,12}?(?:\bis\b|[=:])\s{0,3}(?:nan|NaN|NAN|inf|-inf|Inf)\b",
                needles=("nan", "NaN", "=inf", ": inf"),
                ignorecase=False,
                confidence=0.7,
            ),
            MessagePattern(
                r"\bInput contains (?:NaN|infinity)",
                needles=("Input contains",),
                confidence=0.6,
            ),
        ),
        fixes=(
            FixTemplate(
                "Find the first module that produces the non-finite value",
                "dtype-doctor numerics model.py:build --input 1x4x64x64:float16",
            ),
            FixTemplate(
                "Decode with an fp32 VAE (fp16 VAEs overflow to NaN: black images)",
                "pipe.vae.to(torch.float32)   # or an fp16-fixed VAE",
                when=_({"vae"}),
            ),
            FixTemplate(
                "Use bfloat16 instead of float16 (same range as float32)",
                "model.to(torch.bfloat16)",
            ),
            FixTemplate(
                "Keep the overflowing layer in float32 and cast at its boundary", build="keep_module"
            ),
        ),
        related=("grad-scaler-overflow", "overflow-on-cast"),
        keywords=("nan", "inf", "black", "non-finite", "infinity", "nansexception"),
    ),
    Family(
        code="overflow-on-cast",
        title="Value out of range for the target dtype",
        cause=(
            "A Python number (often -1e9 or float('-inf') for masking, or 1e5 as a constant) does "
            "not fit {dtype}: fp16 ends at 65504."
        ),
        patterns=(
            MessagePattern(
                rf"\bvalue cannot be converted(?: to type (?P<target>{DT}) without overflow)?",
                needles=("cannot be converted",),
            ),
            MessagePattern(
                r"\bRuntimeWarning: overflow encountered in cast",
                needles=("overflow encountered in cast",),
                confidence=0.7,
            ),
        ),
        fixes=(
            LIMIT_AT_BIRTH,
            LIMIT_AT_USE,
            FixTemplate(
                "Use the dtype's own limit instead of a hard-coded big number",
                "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
            ),
            FixTemplate("Or do this step in float32", "scores = scores.float().masked_fill(mask, -1e9)"),
        ),
        related=("nonfinite-values",),
        keywords=("overflow", "converted", "range", "masked_fill", "finfo", "65504"),
    ),
    Family(
        code="bf16-unsupported-hardware",
        title="bfloat16 is not supported (natively) on this hardware",
        cause=(
            "bf16 needs an Ampere-or-newer NVIDIA GPU (compute capability 8.0+), or a recent CPU; "
            "V100/T4/Pascal only emulate it (slowly) or refuse."
        ),
        patterns=(
            MessagePattern(
                r"\bExpected q_dtype == float16 \|\| \(is_sm8x && q_dtype == bfloat16\)",
                note="flash-attn: bfloat16 needs an Ampere (sm80+) GPU",
                needles=("is_sm8x && q_dtype",),
            ),
            MessagePattern(
                r"\bYour setup doesn't support bfloat16",
                note="transformers TrainingArguments",
                needles=("doesn't support bfloat16",),
            ),
            MessagePattern(
                r"\b(?:Current CUDA Device does not support bfloat16|Bfloat16 is only supported on GPUs with compute capability)",
                needles=("does not support bfloat16", "bfloat16 is only supported"),
            ),
            MessagePattern(
                r"\bbfloat16 mixed precision requires",
                note="accelerate",
                needles=("bfloat16 mixed precision requires",),
            ),
            MessagePattern(
                r"\btype (?:bfloat16|fp8\w*) not supported in this architecture",
                note="triton",
                needles=("not supported in this architecture",),
            ),
            MessagePattern(
                r"\bCUBLAS_STATUS_\w+ when calling `?cublas\w+\([^\n]{0,400}?\bbfloat16\b",
                needles=("CUBLAS_STATUS_",),
            ),
            MessagePattern(
                r"\bCUBLAS_STATUS_\w+ when calling `?cublasLt\w*\([^\n]{0,1200}?\babcType 14\b",
                note="cublasLt: abcType 14 is CUDA_R_16BF",
                needles=("CUBLAS_STATUS_",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Use float16 (with autocast + GradScaler for training) on this GPU",
                'with torch.autocast("{device}", dtype=torch.float16):\n    out = model(x)',
            ),
            FixTemplate(
                "Check the real support, not the emulated one",
                "torch.cuda.is_bf16_supported(including_emulation=False)",
            ),
        ),
        related=("half-unsupported-kernel",),
        keywords=("compute capability", "ampere", "architecture", "v100", "t4", "is_bf16_supported"),
    ),
    Family(
        code="cudnn-half-unsupported",
        title="cuDNN has no kernel for this half-precision configuration",
        cause=(
            "cuDNN found no algorithm for this conv/RNN with these dtypes, shapes and layout: mixed "
            "fp16/fp32 operands, non-contiguous fp16 inputs, or an old cuDNN without bf16."
        ),
        patterns=(
            MessagePattern(
                r"\bcuDNN error: CUDNN_STATUS_(?:NOT_SUPPORTED|BAD_PARAM|ARCH_MISMATCH)",
                needles=("CUDNN_STATUS_",),
            ),
            MessagePattern(
                r"\bCUDNN_STATUS_(?:NOT_SUPPORTED|BAD_PARAM|ARCH_MISMATCH|EXECUTION_FAILED|MAPPING_ERROR|INTERNAL_ERROR)",
                note="cuDNN (frontend / backend API) status without the `cuDNN error:` head",
                needles=("CUDNN_STATUS_",),
                confidence=0.7,
            ),
            MessagePattern(
                r"\bGET was unable to find an engine to execute this computation",
                needles=("unable to find an engine",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Give the conv contiguous input and weight of one dtype",
                "x = x.contiguous().to(conv.weight.dtype)",
            ),
            FixTemplate(
                "Let PyTorch fall back: disable cuDNN for this op only to confirm",
                "with torch.backends.cudnn.flags(enabled=False):\n    y = conv(x)",
            ),
            FixTemplate(
                "Upgrade cuDNN/PyTorch (bf16 conv needs cuDNN 8+ and Ampere)", "pip install -U torch"
            ),
        ),
        keywords=("cudnn", "cudnn_status", "engine"),
    ),
    Family(
        code="apex-conflict",
        title="NVIDIA apex kernels disagree with the model's dtypes",
        cause=(
            "NVIDIA apex is installed and was picked up by the code path: its fused kernels "
            "(FusedLayerNorm, FusedRMSNorm swapped in for T5LayerNorm, amp) have their own "
            "mixed-precision rules that disagree with the model's dtypes (fp16 activations, fp32 "
            "norm weights)."
        ),
        patterns=(
            MessagePattern(
                r"\bNo module named '(?P<ext>fused_layer_norm_cuda|amp_C|fused_dense_cuda|apex_C)'",
                info=("ext",),
                note="apex built without its CUDA extensions",
                needles=(
                    "No module named 'fused_layer_norm_cuda'",
                    "No module named 'amp_C'",
                    "No module named 'fused_dense_cuda'",
                    "No module named 'apex_C'",
                ),
            ),
            MessagePattern(
                r"\bmodule 'apex' has no attribute '\w+'",
                note="a broken or unrelated `apex` install",
                needles=("module 'apex'",),
                confidence=0.8,
            ),
            MessagePattern(
                r"\bfrom pyramid\.session import",
                note="the PyPI 'apex' is an unrelated web package",
                needles=("pyramid.session",),
                confidence=0.7,
            ),
        ),
        fixes=(
            FixTemplate(
                "Uninstall apex and use PyTorch's native AMP (the xDiT fix)",
                "pip uninstall -y apex",
                "torch.autocast + torch.amp.GradScaler replace apex.amp; torch's norms follow the weight dtype rules.",
                when=frozenset({"env"}),
            ),
            FixTemplate(
                "Uninstall apex and fall back to PyTorch native AMP",
                "pip uninstall -y apex",
                "Without apex, transformers/xfuser use the PyTorch norms that follow the model's dtype.",
                unless=frozenset({"env"}),
            ),
            FixTemplate(
                "Check library versions: apex must be built for this exact torch/CUDA "
                "(and is deprecated for AMP)",
                "pip list | grep -i -E 'apex|torch|transformers|xfuser'\ndtype-doctor env",
            ),
            FixTemplate(
                "Add explicit dtype checks where the norm receives its input",
                "assert hidden_states.dtype == norm.weight.dtype",
            ),
            NATIVE_AMP,
        ),
        related=("norm-dtype-mismatch", "scalar-type-mismatch"),
        keywords=(
            "apex",
            "amp.initialize",
            "fused_layer_norm",
            "fusedrmsnorm",
            "fusedlayernorm",
            "amp_c",
            "opt_level",
        ),
    ),
    Family(
        code="autocast-half-conflict",
        title="A model already in fp16/bf16 runs under autocast of the other dtype",
        cause=(
            "The model's weights were cast with .half()/.to(bfloat16) and it also runs under "
            "torch.autocast with another low-precision dtype: autocast casts activations to its "
            "dtype, the weights keep theirs, and the first norm or cat sees fp16 next to bf16 "
            "(or fp32)."
        ),
        patterns=(
            MessagePattern(
                r"\bIn \w+ autocast, but the target dtype is not supported",
                note="torch.autocast warning: the requested dtype is not an autocast dtype of this device",
                needles=("autocast, but the target dtype",),
            ),
            MessagePattern(
                r"\bUnexpected floating ScalarType in at::autocast::prioritize",
                note="cat/stack under CPU autocast with fp16 inputs while autocast is bf16 (or reverse)",
                needles=("autocast::prioritize",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Use one precision tool: either the cast model without autocast, or an fp32 model with "
                "autocast",
                "model = model.float()                         # and keep the autocast\n"
                "# or: model.half() and drop `with torch.autocast(...)`",
            ),
            FixTemplate(
                "If you keep both, make the autocast dtype the model's dtype",
                'with torch.autocast("{device}", dtype=next(model.parameters()).dtype):\n    out = model(x)',
            ),
            FixTemplate(
                "With a non-torch backend (OneFlow/onediff) use that backend's autocast, never torch's",
                "with oneflow.autocast('cuda'):\n    ...",
                when=frozenset({"oneflow"}),
            ),
        ),
        related=("oneflow-infer-dtype", "norm-dtype-mismatch", "low-precision-under-autocast"),
        keywords=("autocast", "prioritize", "amp.autocast", "torch.autocast"),
    ),
    Family(
        code="optimizer-state-dtype",
        title="Optimizer state and parameters have different dtypes",
        cause=(
            "The optimizer's state (exp_avg, exp_avg_sq, momentum) or its fused/foreach kernel got "
            "tensors of different dtypes: parameters cast after the optimizer was built, fp16 "
            "gradients with fp32 state, or a state_dict from a run in another precision."
        ),
        patterns=(
            MessagePattern(
                rf"\bexpected dtype (?P<expected>{DT}) for (?:end|weight),? but got (?:dtype )?(?P<found>{DT})",
                note="Tensor.lerp_ (`end`, `weight`): Adam/AdamW update exp_avg with exp_avg.lerp_(grad, 1 - beta1)",
                needles=("expected dtype",),
                confidence=0.7,
            ),
            MessagePattern(
                r"\bparams, grads, exp_avgs, and exp_avg_sqs must have same dtype",
                note="fused Adam/AdamW",
                needles=("exp_avg_sqs must have same dtype",),
            ),
            MessagePattern(
                r"\bTensors of the same index must be on the same device and the same dtype",
                note="foreach optimizers",
                needles=("the same dtype",),
            ),
            MessagePattern(
                r"\bfused=True requires all the params to be floating point Tensors",
                needles=("fused=True requires",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Keep `{model}` in float32 and build `{optimizer}` over it ({at}): float32 master "
                "weights and {optimizer_class} state",
                why="the optimizer updates the parameters it was built over in their own dtype: in "
                "float16 small updates round away and its state under- or overflows",
                needs=("model", "optimizer", "built"),
                build="master_weights",
                language="python",
            ),
            FixTemplate(
                "Cast the model first, then build the optimizer (and keep fp32 master weights)",
                "model = model.to({dtype})\n"
                "optimizer = torch.optim.AdamW(model.parameters())  # your lr and settings",
            ),
            FixTemplate(
                "Train with fp32 parameters under autocast rather than .half() parameters",
                'with torch.autocast("{device}", dtype=torch.bfloat16):\n    loss = model(x)',
            ),
            FixTemplate(
                "With 8-bit / paged optimizers, follow the library's dtype rules for states",
                "bnb.optim.AdamW8bit(model.parameters(), lr=lr)",
                when=_({"bitsandbytes"}),
            ),
        ),
        keywords=("optimizer", "adam", "adamw", "sgd", "exp_avg", "foreach", "optimizer.step", "momentum"),
    ),
    Family(
        code="mps-dtype-unsupported",
        title="This dtype is not supported on Apple MPS",
        cause="Apple's MPS backend has no float64 and limited bf16/fp8 support (bf16 needs macOS 14+).",
        patterns=(
            MessagePattern(
                r"\bCannot convert a MPS Tensor to (?P<dtype>\w+) dtype",
                needles=("mps tensor",),
            ),
            MessagePattern(
                r"\bto the MPS backend but it does not have support for that dtype",
                needles=("mps backend but it does not have support",),
            ),
            MessagePattern(
                r"\bMPS bfloat16 is only supported on macOS \d+",
                needles=("mps bfloat16",),
            ),
        ),
        fixes=(
            FixTemplate("Use float32 (or float16) on MPS", 'model.to("mps", torch.float32)'),
            FixTemplate(
                "Create tensors as float32, not float64, before moving them",
                "torch.from_numpy(a).float().to('mps')",
            ),
        ),
        keywords=("mps", "apple", "metal", "macos"),
    ),
    Family(
        code="quantized-compute-dtype",
        title="Quantized layer's compute dtype differs from its input",
        cause=(
            "A quantized layer (bitsandbytes 4/8-bit, GPTQ, AWQ) dequantizes to its compute dtype "
            "and multiplies with the input: when the two differ it is slow or it fails."
        ),
        patterns=(
            MessagePattern(
                r"\bInput type into Linear4bit is (?P<input>[\w.]+), but bnb_4bit_compute_dtype=(?P<compute>[\w.]+)",
                needles=("compute_dtype",),
            ),
            MessagePattern(
                r"\bOverriding torch_dtype=\w+ with torch_dtype=\w+ due to requirements of bitsandbytes",
                note="transformers loading a bitsandbytes-quantized model",
                needles=("requirements of bitsandbytes",),
                confidence=0.8,
            ),
            MessagePattern(
                r"(?:\bYou cannot cast a \w+ model in a new dtype|\bCasting a \w+ quantized model to a new dtype is not supported"
                r"|(?<!\w)\.(?:half|float16|float|float32|to)\(\) is not supported for (?:quantized model|4-bit|8-bit))",
                note="transformers refuses to cast a quantized model after loading",
                needles=("in a new dtype", "to a new dtype", "quantized model"),
            ),
        ),
        fixes=(
            FixTemplate(
                "Set the quantization compute dtype to the dtype of the activations",
                "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)",
            ),
            FixTemplate(
                "Load the non-quantized parts in the same dtype",
                "AutoModelForCausalLM.from_pretrained(path, quantization_config=cfg, torch_dtype=torch.bfloat16)",
            ),
        ),
        keywords=(
            "bitsandbytes",
            "linear4bit",
            "quantized",
            "quantization",
            "gptq",
            "awq",
            "compute_dtype",
            "4-bit",
            "8-bit",
            "4bit",
            "8bit",
            "load_in_8bit",
            "load_in_4bit",
            "qlora",
            "int8",
        ),
    ),
    Family(
        code="jit-fuser-half",
        title="TorchScript/fuser failed on half precision",
        cause=(
            "A TorchScript/nvFuser/NNC fused kernel was generated or run for fp16/bf16 and failed: "
            "old fusers miss half support, and a scripted graph keeps the dtypes it was traced with."
        ),
        patterns=(
            MessagePattern(
                r"\b(?:nvrtc|NVRTC)[^\n]{0,200}?(?:__half|__nv_bfloat16)",
                needles=("__half", "__nv_bfloat16"),
            ),
            MessagePattern(
                r"\bidentifier \"(?:__half|__nv_bfloat16|float16)\" is undefined",
                needles=("is undefined",),
            ),
            MessagePattern(
                r"\bdefault_program\(\d+\): error",
                note="NVRTC's name for a TorchScript fuser kernel",
                needles=("default_program",),
            ),
            MessagePattern(
                r"\b(?:CUDA )?NVRTC (?:compile error|error)|\bnvrtc(?: compilation failed|: error)",
                note="the fuser's runtime compilation failed",
                needles=("nvrtc",),
                confidence=0.7,
            ),
        ),
        fixes=(
            FixTemplate(
                "Disable the fuser for this model to confirm",
                "torch._C._jit_override_can_fuse_on_gpu(False)\ntorch._C._jit_set_texpr_fuser_enabled(False)",
            ),
            FixTemplate(
                "Script/trace the model after casting it, with inputs of the same dtype",
                "model = model.half()\ntraced = torch.jit.trace(model, example.half())",
            ),
            FixTemplate(
                "Prefer torch.compile over TorchScript on current PyTorch", "model = torch.compile(model)"
            ),
        ),
        keywords=(
            "torchscript",
            "jit",
            "fuser",
            "nvfuser",
            "nvrtc",
            "scripted",
            "codegen",
            "torch.jit",
            "inductor",
        ),
    ),
    Family(
        code="float8-dtype",
        title="float8 tensors do not mix with other dtypes and have few kernels",
        cause=(
            "float8 (e4m3fn, e5m2...) is a storage and scaled-matmul format: PyTorch refuses to promote "
            "it with any other dtype (even the other float8), has no plain matmul, add or reduction "
            "kernels for it on most devices, and casting to fp16 loses the scale. Compute in bf16/fp32 "
            "after dequantizing, or use the scaled matmul built for float8."
        ),
        patterns=(
            MessagePattern(
                rf"\bPromotion for Float8 Types is not supported, attempted to promote (?P<left>{DT}) and (?P<right>{DT})",
                note="type promotion (add, cat, where...) with a float8 operand",
                needles=("promotion for float8",),
            ),
        ),
        fixes=(
            FixTemplate(
                "Dequantize the float8 tensor before computing with it (float8 is storage, not compute)",
                "x = x_fp8.to(torch.bfloat16) * x_scale   # its scale, if it was quantized with one\n"
                "y = x + other.to(torch.bfloat16)",
                "No implicit promotion exists for float8; a cast to fp16 without the scale is wrong by "
                "the scale factor.",
            ),
            FixTemplate(
                "For float8 matmuls use the scaled matmul (both operands float8, explicit scales)",
                "out = torch._scaled_mm(a_fp8, b_fp8.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)",
                "Needs a GPU with float8 tensor cores (sm89/sm90+); dims divisible by 16.",
            ),
            FixTemplate(
                "Or let torchao manage float8 training instead of casting weights yourself",
                "from torchao.float8 import convert_to_float8_training\nconvert_to_float8_training(model)",
            ),
        ),
        related=("half-unsupported-kernel", "matmul-dtype-mismatch"),
        keywords=("float8", "fp8", "e4m3", "e5m2", "float8_e4m3fn", "float8_e5m2", "_scaled_mm"),
    ),
    Family(
        code="device-mismatch",
        title="Not a dtype problem: the tensors are on different devices",
        cause=(
            "The message reads like a dtype mismatch but both sides have the same dtype: one tensor "
            "is on the CPU and the other on CUDA (torch.FloatTensor is a CPU tensor, "
            "torch.cuda.FloatTensor a GPU one). Usually the input was not moved to the model's "
            "device, or a submodule created after model.to(device) stayed on the CPU."
        ),
        patterns=(
            MessagePattern(
                rf"\bInput type \((?P<input>{DT})\) and weight type \((?P<weight>{DT})\) should be the same",
                note="conv: the legacy type names carry the device (torch.cuda.X vs torch.X)",
                needles=("weight type (",),
            ),
            MessagePattern(
                LEGACY_TYPES,
                note="torch < 1.0 type check",
                needles=("tensor but",),
            ),
            MessagePattern(
                _backends("d1", "d2"),
                info=("d1", "d2"),
                roles=(("b1", "expected"), ("b2", "found")),
                note="torch 1.0-1.4 spelling",
                needles=("and dtype",),
            ),
            MessagePattern(
                r"\bExpected all tensors to be on the same device",
                needles=("same device",),
            ),
            MessagePattern(
                r"\bexpected (?:a '(?P<expected>\w+)' device type for \w+ but found '(?P<found>\w+)'|object of device type (?P<expected_old>\w+) but got device type (?P<found_old>\w+))",
                roles=(("expected_old", "expected"), ("found_old", "found")),
                note="torch 1.x argument check / generator device check",
                needles=("device type",),
            ),
            MessagePattern(
                r"\b(?:Input and (?:parameter|hidden) tensors are not at the same device|Tensor for argument #\d+ '\w+' is on CPU, but expected it to be on GPU)",
                needles=("same device", "is on cpu"),
            ),
        ),
        fixes=(
            FixTemplate(
                "Move the input to the device of the model's parameters",
                "device = next(model.parameters()).device\n{tensor} = {tensor}.to(device)",
                "Every input, mask and label must be moved; the model's parameters tell where.",
            ),
            FixTemplate(
                "Move the whole model once, after building it and before the optimizer",
                'model = model.to("cuda")\noptimizer = torch.optim.AdamW(model.parameters(), lr=lr)',
                "A layer created after `.to(device)` (or kept in a plain Python list instead of an "
                "nn.ModuleList) stays on the CPU.",
            ),
        ),
        related=("conv-weight-dtype-mismatch", "scalar-type-mismatch"),
        keywords=("same device", "to(device)", "different devices", "device mismatch"),
    ),
    Family(
        code="unknown",
        title="Not recognised as a known mixed-precision error",
        severity="info",
        cause=(
            "dtype-doctor found no known mixed-precision error family in this text. It does not "
            "guess; the nearest families are listed by the words they share with the text."
        ),
        fixes=(
            FixTemplate(
                "Run the failing code under dtype-doctor to see the operands, modules and origins live",
                "dtype-doctor run your_script.py",
            ),
            FixTemplate(
                "Give explain the whole traceback (not only the last line), or the full log",
                "dtype-doctor explain --file train.log",
            ),
        ),
    ),
)

__all__ = ["ERROR_FAMILIES", "TRIGGERS", "Family", "FixTemplate", "MessagePattern"]
