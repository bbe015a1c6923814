"""The object store's loopback gateway: a TCP relay from the S3 port to moto's, which is what goes down when the
store does (the objects survive behind it, as a real store's would).

    python tests/cluster/cluster_s3_gateway.py LISTEN_PORT STORE_PORT
"""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def gateway(listen: int, target: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            store_reader, store_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, store_writer), _pipe(store_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(gateway(int(sys.argv[1]), int(sys.argv[2])))
