"""The controller's senders: ``drain`` waits until what was queued has been delivered (a
controller shutting down tells the others their new leaders before it resigns)."""

from __future__ import annotations

import asyncio

from strom.broker.cluster.senders import ControllerSenders
from strom.cluster.actions import BrokerCommand, UpdateMetadataCommand

NODE_ID = 1


def command(epoch: int = 1) -> UpdateMetadataCommand:
    return UpdateMetadataCommand(NODE_ID, 10, NODE_ID, epoch, (), ())


def test_drain_returns_once_every_queued_command_is_delivered() -> None:
    async def scenario() -> tuple[bool, list[BrokerCommand], bool]:
        release = asyncio.Event()
        delivered: list[BrokerCommand] = []

        async def deliver(sent: BrokerCommand) -> None:
            await release.wait()
            delivered.append(sent)

        senders = ControllerSenders(NODE_ID, deliver)
        senders.send(command(), None)
        senders.send(command(), None)
        draining = asyncio.create_task(senders.drain(60_000))
        for _ in range(10):
            await asyncio.sleep(0)
        early = draining.done()
        release.set()
        drained = await draining
        await senders.close()
        return early, delivered, drained and not early

    early, delivered, drained = asyncio.run(scenario())
    assert not early, "drain returned while commands were still queued"
    assert len(delivered) == 2
    assert drained


def test_drain_gives_up_after_its_timeout_and_nothing_queued_drains_at_once() -> None:
    async def scenario() -> tuple[bool, bool]:
        never = asyncio.Event()

        async def stuck(_sent: BrokerCommand) -> None:
            await never.wait()

        idle = ControllerSenders(NODE_ID, stuck)
        nothing_queued = await idle.drain(60_000)
        busy = ControllerSenders(NODE_ID, stuck)
        busy.send(command(), None)
        gave_up = not await busy.drain(1)
        await idle.close()
        await busy.close()
        return nothing_queued, gave_up

    nothing_queued, gave_up = asyncio.run(scenario())
    assert nothing_queued
    assert gave_up
