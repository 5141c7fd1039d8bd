"""Recorded error texts from places this machine cannot run (CUDA, Windows, old torch, OneFlow,
flash-attn, DeepSpeed, apex, bitsandbytes, MPS...), with the family each one belongs to.

Sources: the write-ups of the five seed cases, the PyTorch/transformers/diffusers issues where each
text was reported, and the libraries' own check strings.
"""

RECORDED: list[tuple[str, str]] = [
    # CUDA / legacy tensor-type spellings
    (
        "conv-weight-dtype-mismatch",
        "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same",
    ),
    (
        "conv-weight-dtype-mismatch",
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.HalfTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
    ),
    (
        "conv-weight-dtype-mismatch",
        "RuntimeError: Input type (CUDABFloat16Type) and weight type (torch.cuda.FloatTensor) should be the same",
    ),
    (
        "conv-weight-dtype-mismatch",
        "Input type (CPUBFloat16Type) and weight type (torch.FloatTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
    ),
    # Windows (MSVC) spelling
    (
        "conv-bias-dtype-mismatch",
        "RuntimeError: Input type (float) and bias type (struct c10::Half) should be the same",
    ),
    (
        "conv-bias-dtype-mismatch",
        "RuntimeError: Input type (struct c10::BFloat16) and bias type (float) should be the same",
    ),
    (
        "matmul-dtype-mismatch",
        "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != struct c10::Half",
    ),
    (
        "matmul-dtype-mismatch",
        "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
    ),
    (  # all operands CUDA_R_16F: not a mismatch, a half GEMM this GPU/cuBLAS does not have
        "half-unsupported-kernel",
        "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedExFix(handle, opa, opb, m, n, k, (void*)(&falpha), a, CUDA_R_16F, lda, stridea, b, CUDA_R_16F, ldb, strideb, (void*)(&fbeta), c, CUDA_R_16F, ldc, stridec, num_batches, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
    ),
    # OneFlow
    (
        "oneflow-infer-dtype",
        "oneflow._oneflow_internal.exception.Exception: InferDataType Failed. Expected kFloat, but got kFloat16",
    ),
    ("oneflow-infer-dtype", "InferDataType Failed. Expected kFloat16, but got kFloat"),
    # old CPU builds / CUDA bf16
    ("half-unsupported-kernel", "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'"),
    ("half-unsupported-kernel", "RuntimeError: \"LayerNormKernelImpl\" not implemented for 'Half'"),
    ("half-unsupported-kernel", "RuntimeError: \"slow_conv2d_cpu\" not implemented for 'Half'"),
    (
        "mps-dtype-unsupported",
        "TypeError: Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. Please use float32 instead.",
    ),
    (
        "mps-dtype-unsupported",
        "TypeError: Trying to convert Float8_e4m3fn to the MPS backend but it does not have support for that dtype.",
    ),
    (
        "bf16-unsupported-hardware",
        "ValueError: Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to train the model on CPU.",
    ),
    (
        "bf16-unsupported-hardware",
        "RuntimeError: Current CUDA Device does not support bfloat16. Please switch dtype to float16.",
    ),
    (
        "bf16-unsupported-hardware",
        "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')",
    ),
    (
        "cudnn-half-unsupported",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    ),
    ("cudnn-half-unsupported", "RuntimeError: GET was unable to find an engine to execute this computation"),
    ("flash-attention-dtype", "RuntimeError: FlashAttention only support fp16 and bf16 data type"),
    (
        "flash-attention-dtype",
        "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
    ),
    (
        "flash-attention-dtype",
        "UserWarning: Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float, Key dtype: float, and Value dtype: float instead.",
    ),
    ("apex-conflict", "ModuleNotFoundError: No module named 'fused_layer_norm_cuda'"),
    ("apex-conflict", "ImportError: No module named 'amp_C'"),
    (
        "grad-scaler-overflow",
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
    ),
    (
        "grad-scaler-overflow",
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
    ),
    (
        "grad-scaler-overflow",
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    ),
    (
        "grad-scaler-overflow",
        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.",
    ),
    ("nonfinite-values", "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"),
    ("nonfinite-values", "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."),
    (
        "nonfinite-values",
        "/usr/lib/python3/site-packages/diffusers/image_processor.py:90: RuntimeWarning: invalid value encountered in cast",
    ),
    ("nonfinite-values", "step 1200 | loss: nan | lr 3.0e-04"),
    ("nonfinite-values", "Detected inf/nan during batch_number=0"),
    ("overflow-on-cast", "RuntimeError: value cannot be converted to type at::Half without overflow"),
    (
        "loss-dtype-mismatch",
        "RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.",
    ),
    ("loss-dtype-mismatch", "RuntimeError: expected scalar type Long but found Int"),
    (
        "loss-dtype-mismatch",
        "RuntimeError: \"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Int'",
    ),
    (
        "optimizer-state-dtype",
        "RuntimeError: params, grads, exp_avgs, and exp_avg_sqs must have same dtype, device, and layout",
    ),
    (
        "optimizer-state-dtype",
        "RuntimeError: Tensors of the same index must be on the same device and the same dtype except `step` tensors that can be CPU and float32/64 notwithstanding",
    ),
    (
        "quantized-compute-dtype",
        "UserWarning: Input type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 (default). This will lead to slow inference or training speed.",
    ),
    ("jit-fuser-half", 'RuntimeError: default_program(22): error: identifier "__nv_bfloat16" is undefined'),
    ("autocast-half-conflict", "RuntimeError: Unexpected floating ScalarType in at::autocast::prioritize"),
    (
        "index-put-dtype-mismatch",
        "RuntimeError: index_add_(): self (Half) and source (Float) must have the same scalar type",
    ),
    ("index-put-dtype-mismatch", "RuntimeError: scatter(): Expected self.dtype to be equal to src.dtype"),
    (
        "attention-dtype-mismatch",
        "RuntimeError: Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: c10::Half and  query.dtype: float instead.",
    ),
    (
        "norm-dtype-mismatch",
        "UserWarning: Mismatch dtype between input and weight: input dtype = float, weight dtype = c10::Half, Cannot dispatch to fused implementation.",
    ),
    ("fp16-gradient-unscale", "ValueError: Attempting to unscale FP16 gradients."),
    ("scalar-type-mismatch", "RuntimeError: expected scalar type Half but found Float"),
    (
        "matmul-dtype-mismatch",  # torch < 1.5 names the matmul argument
        "RuntimeError: Expected object of scalar type Float but got scalar type Half for argument #2 'mat2'",
    ),
    # older torch and other libraries, as quoted in public issue threads
    ("matmul-dtype-mismatch", "RuntimeError: self and mat2 must have the same dtype"),
    (
        "matmul-dtype-mismatch",
        "RuntimeError: expected both vectors to have same dtype, but found Float and Half",
    ),
    ("norm-dtype-mismatch", "RuntimeError: mixed dtype (CPU): all inputs must share same datatype."),
    (
        "conv-weight-dtype-mismatch",
        "RuntimeError: Expected tensor for argument #1 'input' to have the same type as tensor for argument #2 "
        "'weight'; but type torch.cuda.HalfTensor does not equal torch.cuda.FloatTensor (while checking "
        "arguments for cudnn_convolution)",
    ),
    (
        "attention-dtype-mismatch",
        "RuntimeError: Expected attn_mask dtype to be bool or float or to match query dtype, but got "
        "attn_mask.dtype: long int and  query.dtype: c10::Half instead.",
    ),
    (
        "index-dtype",
        "RuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar types: "
        "Long, Int; but got torch.cuda.HalfTensor instead (while checking arguments for embedding)",
    ),
    ("flash-attention-dtype", "RuntimeError: FlashAttention only supports Ampere GPUs or newer."),
    ("flash-attention-dtype", "RuntimeError: Expected is_sm80 || is_sm90 to be true, but got false."),
    (
        "bf16-unsupported-hardware",
        "RuntimeError: Expected q_dtype == at::kHalf || (is_sm8x && q_dtype == at::kBFloat16) to be true, "
        "but got false.",
    ),
]
