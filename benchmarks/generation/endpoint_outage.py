"""How long a served generator's batch takes to notice an outage, with 10 and with 1,000 requests pending.

``transformers serve`` of the packaged SmolLM2 on loopback behind the tests' fault proxy (tests/model_server.py); one
:class:`~common.models.generation.served.engine.EndpointGenerator` batch of ``pending + 3`` requests (one sample a
source, 2 new tokens, the default breaker, ``max_concurrency`` 3). Three faults: the server killed after 3 answers
(the proxy then answers 502, a gateway before a dead backend), the proxy answering 503 to everything, and nothing
listening at the URL. For each: the seconds from the fault to the batch's EndpointUnreachable, and the requests sent
after the fault. The bound must not grow with what is pending.

    .venv/bin/python benchmarks/generation/endpoint_outage.py [--pending 10 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from cluster.local_cluster import free_port  # noqa: E402
from model_server import FaultProxy, Server, served_generator  # noqa: E402


def _batch(n: int) -> dict:
    import numpy as np

    return {
        "source_id": np.array([f"s{i}" for i in range(n)]),
        "source_text": np.array([f"toy number {i}" for i in range(n)]),
    }


def _outage(folder: str, n: int) -> float:
    """Seconds until the batch of ``n`` requests at the generator ``folder`` raised EndpointUnreachable."""
    from common.models.generation.engines.hf_engine import GenerationSpec
    from common.models.generation.served.engine import EndpointGenerator, ServedGenerator
    from common.platform.errors import EndpointUnreachable

    engine = EndpointGenerator(
        ServedGenerator.read(folder), "bench", GenerationSpec(n_samples=1, max_new_tokens=2, seed=1), tag="bench"
    )
    try:
        engine(_batch(n))
    except EndpointUnreachable:
        return time.monotonic()
    raise AssertionError("the batch did not fail")


def main() -> None:
    from common.models.config import EndpointConfig
    from common.models.generation.kinds.smollm2 import materialise_smollm2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[10, 1000])
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="endpoint-outage-"))
    server = Server(str(materialise_smollm2()), scratch)
    print(f"{'fault':<34} {'pending':>7} {'seconds to exit':>15} {'sent after the fault':>21}")
    for pending in args.pending:
        server.start()
        killed: list[float] = []
        proxy = FaultProxy(
            server.base,
            answers=3,
            then=lambda killed=killed, server=server: (killed.append(time.monotonic()), server.kill()),
        )
        folder = served_generator(
            scratch / f"endpoint_kill{pending}-1",
            EndpointConfig(base_url=proxy.base, model=server.folder, max_concurrency=3),
        )
        ended = _outage(folder, pending + 3)
        print(
            f"{'server killed after 3 answers':<34} {pending:>7} {ended - killed[0]:>15.2f} "
            f"{proxy.since(killed[0]):>21}"
        )
        proxy.close()
        proxy = FaultProxy(server.base, down=True)
        folder = served_generator(
            scratch / f"endpoint_down{pending}-1",
            EndpointConfig(base_url=proxy.base, model=server.folder, max_concurrency=3),
        )
        started = time.monotonic()
        ended = _outage(folder, pending)
        print(f"{'gateway: 503 to everything':<34} {pending:>7} {ended - started:>15.2f} {len(proxy.seen):>21}")
        proxy.close()
        folder = served_generator(
            scratch / f"endpoint_none{pending}-1",
            EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", max_concurrency=3),
        )
        started = time.monotonic()
        ended = _outage(folder, pending)
        print(f"{'nothing listening':<34} {pending:>7} {ended - started:>15.2f} {'-':>21}")
    server.kill()


if __name__ == "__main__":
    main()
