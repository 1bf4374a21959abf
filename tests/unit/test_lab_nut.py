"""The lab's NUT server (`lightsout_lab.nut`): Debian's upsd and dummy-ups on loopback, read
through aionut as the operator reads a UPS: the first readings, a change to battery, the server
going away and coming back on the same port."""

from __future__ import annotations

import asyncio
import time

import pytest
from aionut import AIONUTClient, NUTOSError

from lightsout_lab.nut import NutServer

pytestmark = pytest.mark.unit


async def _readings_through_aionut(server: NutServer) -> None:
    client = AIONUTClient(server.host, server.port, server.username, server.password, timeout=2)
    try:
        first = await client.list_vars(server.ups)
        assert first["ups.status"] == "OL CHRG"
        assert first["battery.charge"] == "100"

        server.set(status="OB DISCHRG", charge=80, runtime=600)
        on_battery = await client.list_vars(server.ups)
        assert set(on_battery["ups.status"].split()) == {"OB", "DISCHRG"}
        assert on_battery["battery.charge"] == "80"
        assert on_battery["battery.runtime"] == "600"
        assert on_battery["ups.load"] == "23"  # unchanged

        server.pause()
        began = time.monotonic()
        with pytest.raises(NUTOSError):
            await client.list_vars(server.ups)
        assert time.monotonic() - began < 5

        server.resume()
        back = await client.list_vars(server.ups)  # the same client reconnects
        assert back["ups.status"] == "OB DISCHRG"
        assert back["battery.charge"] == "80"
    finally:
        client.shutdown()


def test_aionut_reads_what_is_set_and_fails_while_paused() -> None:
    with NutServer() as server:
        assert server.address == f"lab@127.0.0.1:{server.port}"
        asyncio.run(_readings_through_aionut(server))
        assert server.read()["battery.runtime"] == "600"
