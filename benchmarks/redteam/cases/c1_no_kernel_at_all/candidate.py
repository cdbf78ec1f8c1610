import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        torch.add(a, b, out=out)
        return out
