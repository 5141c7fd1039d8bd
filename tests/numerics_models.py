"""Tiny real models made to overflow in float16 (factories for the numerics tests and CLI).

Weights are scaled so that one named module's float16 output exceeds 65504 while float32
stays finite and the model's later normalisation brings the values back.
"""

from __future__ import annotations

import torch

import tiny_models

VAE_PRODUCER = "decoder.up_blocks.0.resnets.0.conv1"
T5_PRODUCER = "encoder.block.0.layer.1.DenseReluDense.wi"


def make_vae(overflow: bool = True):
    vae = tiny_models.vae(sample_size=16).eval()
    if overflow:
        with torch.no_grad():
            vae.get_submodule(VAE_PRODUCER).weight.mul_(1e5)
    return vae


def make_t5(overflow: bool = True):
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=100, d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, dropout_rate=0.0
    )
    model = T5EncoderModel(config).eval()
    if overflow:
        ff = model.get_submodule(T5_PRODUCER.rpartition(".")[0])
        with torch.no_grad():
            ff.wi.weight.mul_(1e5)  # wi's output exceeds float16's range ...
            ff.wo.weight.mul_(1e-5)  # ... and wo brings it back down
    return model
