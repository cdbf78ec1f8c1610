"""One LSTM cell step (torch.nn.LSTMCell): returns (h', c') for a batch of inputs and states.

Gate order in the weights is PyTorch's: input, forget, cell candidate, output.
"""

import torch

BATCH = 1024
INPUT_SIZE = 1024
HIDDEN_SIZE = 1024


class Model(torch.nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.cell = torch.nn.LSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        h_next, c_next = self.cell(x, (h, c))
        return h_next, c_next


def get_inputs():
    return [torch.randn(BATCH, INPUT_SIZE), torch.randn(BATCH, HIDDEN_SIZE), torch.randn(BATCH, HIDDEN_SIZE)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE]
