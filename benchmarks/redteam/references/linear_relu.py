"""relu(x @ W^T + b) with a learned (64 -> 32) linear layer."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 32]
