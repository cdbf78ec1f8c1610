"""Plans for the doubled-batch inputs, built from the problem's own input sets."""

from __future__ import annotations

import torch

from sandbox_side.judging.shape_variant import wider_batch_plans


def test_every_input_sharing_the_leading_size_is_doubled_first():
    first = [torch.zeros(8, 3), torch.zeros(8), torch.zeros(5, 8), 2.0]
    second = [torch.ones(8, 3), torch.ones(8), torch.ones(5, 8), 2.0]
    plans = wider_batch_plans(first, second)
    assert [p.widened for p in plans] == [[0, 1], [0]]
    args = plans[0].args
    assert args[0].shape == (16, 3) and args[1].shape == (16,) and args[2].shape == (5, 8) and args[3] == 2.0
    # Values come from both input sets, not a repeat of one.
    assert args[0][:8].eq(0).all() and args[0][8:].eq(1).all()


def test_no_plan_without_a_tensor_to_double():
    assert wider_batch_plans([3, torch.tensor(1.0)], [3, torch.tensor(2.0)]) == []


def test_inputs_whose_other_dimensions_vary_are_not_joined():
    assert wider_batch_plans([torch.zeros(4, 3)], [torch.zeros(4, 5)]) == []
