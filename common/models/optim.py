"""The encoder fine-tunes' optimisation recipe, shared by the multi-label encoder and BoostAug's surrogate."""
from __future__ import annotations


class LinearWarmupAdamW:
    """AdamW with a linear warm-up over ``warmup_steps`` then linear decay to 0 at ``total_steps``, and
    gradients clipped to norm 1.0 (the recipe BERT-style encoders are fine-tuned with)."""

    def __init__(self, parameters, learning_rate: float, warmup_steps: int, total_steps: int):
        import torch
        from transformers import get_linear_schedule_with_warmup

        self.parameters = list(parameters)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=learning_rate)
        self.schedule = get_linear_schedule_with_warmup(self.optimizer, warmup_steps, total_steps)

    def step(self, loss) -> float:
        """Back-propagate ``loss`` (a scalar tensor), clip, update, advance the schedule; returns the loss."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimizer.step()
        self.schedule.step()
        return float(loss.detach())
