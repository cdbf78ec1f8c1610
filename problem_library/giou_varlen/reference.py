"""GIoU loss over a batch of variable-length box sets, given as padded tensors plus lengths.

pred and target are (BATCH, MAX_BOXES, 4) fp32 boxes (x1, y1, x2, y2); lengths (BATCH,) int64
says how many leading boxes of each set are real (1..MAX_BOXES); the rest is padding and must
not count. The loss is the mean over sets of each set's mean (1 - GIoU(pred, target)), a 0-dim
tensor. This is the padded PyTorch formulation: every op runs over the padding too, then masks.
"""

import torch

BATCH = 256
MAX_BOXES = 2048
EPS = 1e-7


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        px1, py1, px2, py2 = pred.unbind(-1)
        tx1, ty1, tx2, ty2 = target.unbind(-1)
        inter = ((torch.minimum(px2, tx2) - torch.maximum(px1, tx1)).clamp(min=0)
                 * (torch.minimum(py2, ty2) - torch.maximum(py1, ty1)).clamp(min=0))
        union = (px2 - px1) * (py2 - py1) + (tx2 - tx1) * (ty2 - ty1) - inter + EPS
        iou = inter / union
        enclosing = ((torch.maximum(px2, tx2) - torch.minimum(px1, tx1))
                     * (torch.maximum(py2, ty2) - torch.minimum(py1, ty1)) + EPS)
        loss = 1.0 - (iou - (enclosing - union) / enclosing)
        positions = torch.arange(pred.shape[1], device=pred.device)
        valid = positions[None, :] < lengths[:, None]
        per_set = torch.where(valid, loss, torch.zeros_like(loss)).sum(dim=1) / lengths.to(loss.dtype)
        return per_set.mean()


def _xyxy(cx, cy, w, h):
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)


def get_inputs():
    shape = (BATCH, MAX_BOXES)
    t_cx, t_cy = torch.rand(shape), torch.rand(shape)
    t_w = 0.05 + 0.25 * torch.rand(shape)
    t_h = 0.05 + 0.25 * torch.rand(shape)
    # Predictions resized by 0.5x-1.5x and moved by up to `spread` box sizes. `spread` is drawn per
    # set (0.2 to 2.4): sets differ in their mean loss, so weighting sets by their length (a wrong
    # reduction) shows, many pairs do not overlap (the enclosing-box term matters), and the loss
    # differs between calls.
    spread = 0.2 + 2.2 * torch.rand((BATCH, 1))
    p_w = t_w * (0.5 + torch.rand(shape))
    p_h = t_h * (0.5 + torch.rand(shape))
    p_cx = t_cx + (2.0 * torch.rand(shape) - 1.0) * spread * t_w
    p_cy = t_cy + (2.0 * torch.rand(shape) - 1.0) * spread * t_h
    # The padding holds real-looking boxes, not zeros: a kernel that reads past a set's length
    # gets a different answer.
    lengths = torch.randint(1, MAX_BOXES + 1, (BATCH,), dtype=torch.int64)
    return [_xyxy(p_cx, p_cy, p_w, p_h), _xyxy(t_cx, t_cy, t_w, t_h), lengths]


def get_init_inputs():
    return []
