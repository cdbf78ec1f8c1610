"""2D max pooling, kernel 3, stride 2, padding 1 (padding never wins the max), on (N, C, H, W) fp32."""

import torch

BATCH = 32
CHANNELS = 64
HEIGHT = 112
WIDTH = 112


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
