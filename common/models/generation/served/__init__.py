"""A generator served behind an OpenAI-compatible API (``model.kind: endpoint``), in five modules:

- :mod:`~common.models.generation.served.client`: the requests (an asyncio client: retries, 429s, the key);
- :mod:`~common.models.generation.served.health`: the breaker, the 429 pause and the pace, per endpoint per worker;
- :mod:`~common.models.generation.served.log`: the response log, an answer kept by its request's key;
- :mod:`~common.models.generation.served.engine`: the pool's engine and the stage's failed-share check;
- :mod:`~common.models.generation.served.checks`: the start check, ``augment doctor``'s line.
"""
