"""The fine-tunes' shared helpers: the encoders' optimisation recipe (the multi-label encoder and BoostAug's
surrogate) and the generators' progress lines."""

from __future__ import annotations

import logging
import time

PROGRESS_SECONDS = 60.0  # a progress line at most this often (wall time)


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


class StepProgress:
    """A training loop's progress in ``log`` at most every :data:`PROGRESS_SECONDS`: on 2 CPU cores one
    epoch of a pretrained generator can take half an hour, and the epoch's own line would be the first sign of
    life. Each line gives the step of ``total``, the mean loss since the last line, steps/s and the time left
    at that rate."""

    def __init__(self, log: logging.Logger, total: int):
        self.log, self.total = log, total
        self.start = self.last = time.perf_counter()
        self.logged = 0

    def step(self, losses: list[float]) -> None:
        """After each optimiser step: ``losses`` is every step's loss so far (one per step)."""
        now = time.perf_counter()
        if now - self.last < PROGRESS_SECONDS or len(losses) <= self.logged:
            return
        rate, recent = len(losses) / max(now - self.start, 1e-9), losses[self.logged :]
        self.log.info(
            "step %d/%d: mean loss %.4f over the last %d steps, %.2f steps/s, about %.0f s left",
            len(losses),
            self.total,
            sum(recent) / len(recent),
            len(recent),
            rate,
            max(0, self.total - len(losses)) / rate,
        )
        self.last, self.logged = now, len(losses)
