"""A generator served behind an OpenAI-compatible API (``model.kind: endpoint``), in eight modules:

- :mod:`~common.models.generation.served.client`: the requests (an asyncio client: retries, 429s, the answers);
- :mod:`~common.models.generation.served.retry`: the retry policy (the refusals, ``Retry-After``, the backoff);
- :mod:`~common.models.generation.served.auth`: the API key (read once, held as a fingerprinted secret, the header);
- :mod:`~common.models.generation.served.health`: the breaker, the 429 pause and the pace, per endpoint per worker;
- :mod:`~common.models.generation.served.log`: the response log (its layout, its writing, a stage's usage);
- :mod:`~common.models.generation.served.answers`: the log's reading, an answer kept by its request's key;
- :mod:`~common.models.generation.served.engine`: the pool's engine and the stage's failed-share check;
- :mod:`~common.models.generation.served.checks`: the start check, ``augment doctor``'s line.

The lease a stage holds on its logs while it sends is the stage's (:mod:`common.stages.served_lease`).
"""
