"""A classification head added after the backbone was converted to fp16."""

import torch
from torch import nn

import tiny_models

model = tiny_models.vit(add_pooling_layer=False).eval().half()
model.classifier = nn.Linear(model.config.hidden_size, 10)
pixel_values = torch.randn(1, 3, 16, 16, dtype=torch.float16)


def classify(pixels):
    hidden = model(pixel_values=pixels).last_hidden_state
    return model.classifier(hidden[:, 0])


# FIX HERE
with torch.no_grad():
    logits = classify(pixel_values)
