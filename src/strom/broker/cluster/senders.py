"""The controller's channel to every broker: one queue and one connection per broker.

Commands (LeaderAndIsr, UpdateMetadata, StopReplica) to one broker are sent in order, one at a
time: the next goes once the broker answered the previous one, so a broker applies them in the
order the controller decided them. A command whose sending fails is sent again (after a short
pause, over a new connection) until it is answered, the broker's registration changes (it
restarted: its queue is dropped, the controller sends it a full state anyway) or the controller
resigns (every queue is dropped; the next controller resends everything). Commands to this broker
itself are handed to it directly, in the same order, without a socket.

A controller that is shutting down (SIGTERM) first waits for what it queued to be delivered
(``drain``): the LeaderAndIsr and UpdateMetadata that move its own leaderships away would otherwise
be dropped as it resigns, and the others would learn the new leaders only from the next
controller, tens of milliseconds later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from strom.broker.cluster.peer import PLAINTEXT_DIALER, PeerConnection, PeerDialer, PeerError
from strom.cluster import wire
from strom.cluster.actions import (
    BrokerCommand,
    LeaderAndIsrCommand,
    UpdateMetadataCommand,
)
from strom.cluster.model import BrokerRegistration
from strom.protocol.messages.leader_and_isr import LeaderAndIsrResponse
from strom.protocol.messages.stop_replica import StopReplicaResponse
from strom.protocol.messages.update_metadata import UpdateMetadataResponse

log = logging.getLogger("strom.broker.cluster")

RETRY_BACKOFF_MS = 200
REQUEST_TIMEOUT_MS = 30_000


class _Sender:
    """The queue and connection for one broker (one registration of it)."""

    def __init__(self, registration: BrokerRegistration, client_id: str, dialer: PeerDialer) -> None:
        self.registration = registration
        self._dialer = dialer
        self.queue: asyncio.Queue[BrokerCommand] = asyncio.Queue()
        self._client_id = client_id
        self._peer: PeerConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopped = False

    def _connection(self) -> PeerConnection:
        if self._peer is None or self._peer.closed:
            host, port = self._dialer.address(self.registration)
            self._peer = self._dialer.connection(host, port, self._client_id)
        return self._peer

    async def run(self) -> None:
        while not self.stopped:
            command = await self.queue.get()
            try:
                await self._deliver(command)
            finally:
                self.queue.task_done()

    async def _deliver(self, command: BrokerCommand) -> None:
        while not self.stopped:
            try:
                await _send(self._connection(), command)
                return
            except PeerError as error:
                log.debug("controller command to broker %d failed (%s); retrying", command.broker_id, error)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            except Exception:
                log.exception(
                    "cannot send %s to broker %d; dropped", type(command).__name__, command.broker_id
                )
                return

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()
        if self._peer is not None:
            self._peer.close()


async def _send(peer: PeerConnection, command: BrokerCommand) -> None:
    if isinstance(command, LeaderAndIsrCommand):
        await peer.request(
            wire.leader_and_isr_request(command),
            wire.LEADER_AND_ISR_VERSION,
            LeaderAndIsrResponse,
            REQUEST_TIMEOUT_MS,
        )
    elif isinstance(command, UpdateMetadataCommand):
        await peer.request(
            wire.update_metadata_request(command),
            wire.UPDATE_METADATA_VERSION,
            UpdateMetadataResponse,
            REQUEST_TIMEOUT_MS,
        )
    else:
        await peer.request(
            wire.stop_replica_request(command),
            wire.STOP_REPLICA_VERSION,
            StopReplicaResponse,
            REQUEST_TIMEOUT_MS,
        )


class ControllerSenders:
    def __init__(
        self,
        node_id: int,
        deliver_locally: Callable[[BrokerCommand], Awaitable[object]],
        dialer: PeerDialer = PLAINTEXT_DIALER,
    ) -> None:
        self._node_id = node_id
        self._dialer = dialer
        self._deliver_locally = deliver_locally
        self._client_id = f"strom-controller-{node_id}"
        self._senders: dict[int, _Sender] = {}
        self._local: asyncio.Queue[BrokerCommand] = asyncio.Queue()
        self._local_task: asyncio.Task[None] | None = None
        self._epoch = -1

    def send(self, command: BrokerCommand, registration: BrokerRegistration | None) -> None:
        """Queue ``command`` (loop thread). A newer controller epoch (this broker took office
        again) drops whatever an earlier term left queued."""
        if command.controller_epoch > self._epoch:
            self.drop_all()
            self._epoch = command.controller_epoch
        elif command.controller_epoch < self._epoch:
            return
        if command.broker_id == self._node_id:
            if self._local_task is None:
                self._local_task = asyncio.get_running_loop().create_task(self._run_local())
            self._local.put_nowait(command)
            return
        if registration is None:
            return  # the broker is gone: it gets the full state when it registers again
        sender = self._senders.get(command.broker_id)
        if sender is not None and sender.registration.epoch != registration.epoch:
            sender.stop()
            sender = None
        if sender is None:
            sender = self._senders[command.broker_id] = _Sender(registration, self._client_id, self._dialer)
            sender.task = asyncio.get_running_loop().create_task(sender.run())
        sender.queue.put_nowait(command)

    async def _run_local(self) -> None:
        while True:
            command = await self._local.get()
            try:
                await self._deliver_locally(command)
            except Exception:
                log.exception("applying the controller's %s to this broker failed", type(command).__name__)
            finally:
                self._local.task_done()

    async def drain(self, timeout_ms: int) -> bool:
        """Wait until every command queued so far has been delivered (answered by its broker, or
        applied here), at most ``timeout_ms``; whether they all were."""
        queues = [sender.queue for sender in self._senders.values() if not sender.stopped]
        if self._local_task is not None:
            queues.append(self._local)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await asyncio.gather(*(queue.join() for queue in queues))
        except TimeoutError:
            return False
        return True

    def keep_only(self, live: Mapping[int, BrokerRegistration]) -> None:
        """The controller's live brokers changed: stop sending to those that left."""
        for node_id in list(self._senders):
            registration = live.get(node_id)
            if registration is None or registration.epoch != self._senders[node_id].registration.epoch:
                self._senders.pop(node_id).stop()

    def drop_all(self) -> None:
        """This broker is no longer the controller (or is a new term of it)."""
        for sender in self._senders.values():
            sender.stop()
        self._senders.clear()
        while not self._local.empty():
            self._local.get_nowait()
            self._local.task_done()

    async def close(self) -> None:
        self.drop_all()
        if self._local_task is not None:
            self._local_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._local_task
            self._local_task = None
