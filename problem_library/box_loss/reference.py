"""Mean IoU loss, mean(1 - IoU(pred, target)), over NUM_BOXES pairs of (x1, y1, x2, y2) boxes.

Returns a 0-dim tensor. Pairs that do not overlap have an intersection of zero (clamped).
"""

import torch

NUM_BOXES = 4_000_000
EPS = 1e-7


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ix1 = torch.maximum(pred[:, 0], target[:, 0])
        iy1 = torch.maximum(pred[:, 1], target[:, 1])
        ix2 = torch.minimum(pred[:, 2], target[:, 2])
        iy2 = torch.minimum(pred[:, 3], target[:, 3])
        inter = (ix2 - ix1).clamp(min=0) * (iy2 - iy1).clamp(min=0)
        area_pred = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
        area_target = (target[:, 2] - target[:, 0]) * (target[:, 3] - target[:, 1])
        iou = inter / (area_pred + area_target - inter + EPS)
        return (1.0 - iou).mean()


def _xyxy(cx: torch.Tensor, cy: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=1)


def get_inputs():
    n = NUM_BOXES
    t_cx, t_cy = torch.rand(n), torch.rand(n)
    t_w = 0.05 + 0.25 * torch.rand(n)
    t_h = 0.05 + 0.25 * torch.rand(n)
    # Predictions: resized by 0.5x-1.5x and moved by up to `spread` box sizes. With spread >= 1.2
    # a sizeable share of pairs do not overlap in x, in y, or in both (non-overlap needs a shift
    # above 0.75-1.25 box sizes). `spread` is drawn once per call, so the mean loss differs
    # between calls by far more than the tolerance and a constant output cannot pass.
    spread = 1.2 + 1.2 * torch.rand(())
    p_w = t_w * (0.5 + torch.rand(n))
    p_h = t_h * (0.5 + torch.rand(n))
    p_cx = t_cx + (2.0 * torch.rand(n) - 1.0) * spread * t_w
    p_cy = t_cy + (2.0 * torch.rand(n) - 1.0) * spread * t_h
    return [_xyxy(p_cx, p_cy, p_w, p_h), _xyxy(t_cx, t_cy, t_w, t_h)]


def get_init_inputs():
    return []
