"""One AMQP 0-9-1 channel: exchange, queue, basic, confirm and tx methods over the broker's
virtual host. Channel exceptions raise ``ChannelError`` (the connection answers with
channel.close); connection exceptions raise ``AmqpCodecError``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from mainstem.broker.amqp.queues import (
    ClassicQueue,
    PublishOutcome,
    QueueMessage,
    ResourceLocked,
    VirtualHost,
)
from mainstem.broker.amqp.queues.credit_flow import CreditFlow
from mainstem.broker.amqp.queues.remote import RemoteQueue
from mainstem.broker.amqp.routing import Binding, ExchangeType
from mainstem.broker.auth import PermissionKind, User
from mainstem.broker.core import BrokerCore
from mainstem.broker.errors import (
    AccessRefused,
    BrokerError,
    NotFound,
    PreconditionFailed,
)
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.streams import Stream
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.channel_state import (
    ConsumerTags,
    DeliveryTags,
    PublisherConfirms,
    QueueNames,
    Settle,
    Transaction,
    require_utf8,
)
from mainstem.protocols.amqp091.consumers import Consumer, Outgoing, QueueConsumer, StreamConsumer
from mainstem.protocols.amqp091.encode import encode_content
from mainstem.protocols.amqp091.errors import AmqpCodecError, ChannelError
from mainstem.protocols.amqp091.events import ContentMessage
from mainstem.protocols.amqp091.methods import ReplyCode
from mainstem.protocols.amqp091.properties import essentials, headers_of, to_stream_record
from mainstem.protocols.amqp091.state import ChannelCredit
from mainstem.protocols.amqp091.wire import Method

Write = asyncio.Future[None]
NO_ROUTE = 312  # basic.return's reply code for an unroutable mandatory message


def broker_error(exc: BrokerError, method: Method) -> Exception:
    """The AMQP exception for a broker error, with RabbitMQ's codes."""
    if isinstance(exc, ResourceLocked):
        return ChannelError(ReplyCode.RESOURCE_LOCKED, exc.message, method)
    if isinstance(exc, AccessRefused):
        return ChannelError(ReplyCode.ACCESS_REFUSED, exc.message, method)
    if isinstance(exc, NotFound):
        return ChannelError(ReplyCode.NOT_FOUND, exc.message, method)
    return ChannelError(ReplyCode.PRECONDITION_FAILED, exc.message, method)


class _Delivery:
    __slots__ = ("consumer", "message", "queue")

    def __init__(self, consumer: Consumer | None, queue: ClassicQueue | None,
                 message: QueueMessage | None) -> None:
        self.consumer = consumer  # None for basic.get
        self.queue = queue  # None for a stream delivery
        self.message = message


class Connection(Outgoing, Protocol):
    """What a channel needs of its connection (`connection.AmqpConnection`)."""

    core: BrokerCore
    vhost: VirtualHost | None
    flow: CreditFlow

    @property
    def user(self) -> User: ...

    @property
    def cancel_notify(self) -> bool: ...

    def send_method(self, channel: int, method: Method) -> None: ...


class Channel:
    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        assert connection.vhost is not None, "channels open once the connection is open"
        self.vhost = connection.vhost
        self.closing = False  # we sent channel.close and wait for close-ok
        self.ended = False  # the close handshake is over: nothing more is sent
        self.consumers: ConsumerTags[Consumer] = ConsumerTags()
        self.deliveries: DeliveryTags[_Delivery] = DeliveryTags()
        self.credit = ChannelCredit(self.deliveries)
        self.confirms: PublisherConfirms[Write] = PublisherConfirms()
        self._confirms_drained: asyncio.Future[None] | None = None
        self.tx = Transaction()
        self.queue_names = QueueNames()
        self._write_allowed: set[str] = set()
        self.stats = MessageStats()
        self._handlers: dict[type[Method], Callable[[Any], Any]] = {
            m.ChannelFlow: self.on_flow,
            m.ExchangeDeclare: self.on_exchange_declare,
            m.ExchangeDelete: self.on_exchange_delete,
            m.ExchangeBind: self.on_exchange_bind,
            m.ExchangeUnbind: self.on_exchange_unbind,
            m.QueueDeclare: self.on_queue_declare,
            m.QueueBind: self.on_queue_bind,
            m.QueueUnbind: self.on_queue_unbind,
            m.QueuePurge: self.on_queue_purge,
            m.QueueDelete: self.on_queue_delete,
            m.BasicQos: self.on_qos,
            m.BasicConsume: self.on_consume,
            m.BasicCancel: self.on_cancel,
            m.BasicGet: self.on_get,
            m.BasicAck: self.on_settle,
            m.BasicNack: self.on_settle,
            m.BasicReject: self.on_settle,
            m.BasicRecover: self.on_recover,
            m.BasicRecoverAsync: self.on_recover,
            m.ConfirmSelect: self.on_confirm_select,
            m.TxSelect: self.on_tx_select,
            m.TxCommit: self.on_tx_commit,
            m.TxRollback: self.on_tx_rollback,
        }

    def describe(self) -> dict[str, object]:
        """The channel's state as RabbitMQ's /api/channels shows it, counters apart."""
        return {"number": self.number, "consumer_count": len(self.consumers),
                "messages_unacknowledged": len(self.deliveries),
                "messages_unconfirmed": self.confirms.unconfirmed,
                "messages_uncommitted": len(self.tx.publishes),
                "acks_uncommitted": len(self.tx.settles),
                "prefetch_count": self.credit.prefetch_count,
                "global_prefetch_count": self.credit.global_prefetch,
                "confirm": self.confirms.enabled, "transactional": self.tx.enabled,
                "state": "closing" if self.closing else "running"}

    # -- plumbing ------------------------------------------------------------

    def reply(self, method: Method) -> None:
        """Send on this channel, unless it is closing or closed (confirms may be late)."""
        if not (self.closing or self.ended):
            self.connection.send_method(self.number, method)

    async def handle(self, method: Method) -> None:
        handler = self._handlers.get(type(method))
        if handler is None:
            raise AmqpCodecError(ReplyCode.COMMAND_INVALID,
                                 f"method {method.NAME} not allowed on a channel", method=method)
        try:
            result = handler(method)
            if asyncio.iscoroutine(result):
                await result
        except BrokerError as exc:
            raise broker_error(exc, method) from None

    def check(self, kind: PermissionKind, resource: str, resource_type: str) -> None:
        self.connection.core.auth.check(self.connection.user, self.vhost.name, kind, resource,
                                        resource_type)

    def audit(self, action: str, **names: str) -> None:
        self.connection.ctx.audit(action, vhost=self.vhost.name, **names)

    def check_topic(self, exchange: str, kind: Literal["write", "read"], key: str) -> None:
        """RabbitMQ's topic authorisation, on topic exchanges only; without any topic
        permission in the catalog (most brokers) a publish pays one attribute read."""
        core = self.connection.core
        if not core.catalog.holds_topic_permissions:
            return
        graph = self.vhost.graph
        if graph.has_exchange(exchange) and \
                graph.get_exchange(exchange).type is ExchangeType.TOPIC:
            core.auth.check_topic(self.connection.user, self.vhost.name, exchange, kind, key)

    def next_delivery_tag(self, consumer: Consumer | None, message: QueueMessage | None) -> int:
        if consumer is not None and consumer.no_ack:
            return self.deliveries.deliver(None)
        queue = consumer.queue if consumer is not None else None
        return self.deliveries.deliver(
            _Delivery(consumer, queue if isinstance(queue, ClassicQueue) else None, message))

    def counted(self, queue: str, size: int) -> None:
        self.connection.core.delivery_stats.delivered(self.vhost.name, queue, 1, size)

    def resume(self) -> None:
        """Credit may be back (acks, flow, a drained socket): deliver again."""
        for consumer in self.consumers:
            if isinstance(consumer, StreamConsumer):
                consumer.resume()
            else:
                consumer.queue.dispatch()

    # -- channel ---------------------------------------------------------------

    def on_flow(self, method: m.ChannelFlow) -> None:
        self.reply(self.credit.flow(method))

    def close(self) -> None:
        """The channel ends: consumers stop, unacked messages go back to their queues."""
        self.credit.close()
        for consumer in self.consumers.take_all():
            consumer.stop()
            self.connection.ctx.remove_consumer(consumer.tag)
        self._requeue(self.deliveries.take_all())

    # -- exchanges -------------------------------------------------------------

    async def on_exchange_declare(self, method: m.ExchangeDeclare) -> None:
        graph = self.vhost.graph
        if method.passive:
            graph.passive_declare_exchange(method.exchange)
        else:
            require_utf8("exchange", method.exchange, method)
            self.check("configure", method.exchange, "exchange")
            new = not graph.has_exchange(method.exchange)
            exchange = graph.declare_exchange(
                method.exchange, method.type, durable=method.durable,
                auto_delete=method.auto_delete, internal=method.internal,
                arguments=method.arguments)
            self.vhost.changed(durable=exchange.durable)
            await self.vhost.shared()
            if new:
                self.audit("exchanges.create", name=method.exchange)
        if not method.no_wait:
            self.reply(m.ExchangeDeclareOk())

    async def on_exchange_delete(self, method: m.ExchangeDelete) -> None:
        self.check("configure", method.exchange, "exchange")
        existed = self.vhost.graph.has_exchange(method.exchange)
        self.vhost.graph.delete_exchange(method.exchange, if_unused=method.if_unused)
        self.vhost.changed(durable=True)
        await self.vhost.shared()
        if existed:
            self.audit("exchanges.delete", name=method.exchange)
        if not method.no_wait:
            self.reply(m.ExchangeDeleteOk())

    def _exchange_binding(self, method: m.ExchangeBind | m.ExchangeUnbind) -> Binding:
        self.check("write", method.destination, "exchange")
        self.check("read", method.source, "exchange")
        self.check_topic(method.source, "read", method.routing_key)
        return Binding(method.source, method.destination, "exchange", method.routing_key,
                       method.arguments)

    async def on_exchange_bind(self, method: m.ExchangeBind) -> None:
        self.vhost.bind(self._exchange_binding(method))
        await self.vhost.shared()
        self._audit_binding("bindings.create", method.source, method.destination, "exchange",
                            method.routing_key)
        if not method.no_wait:
            self.reply(m.ExchangeBindOk())

    async def on_exchange_unbind(self, method: m.ExchangeUnbind) -> None:
        self.vhost.unbind(self._exchange_binding(method), self.connection)
        await self.vhost.shared()
        self._audit_binding("bindings.delete", method.source, method.destination, "exchange",
                            method.routing_key)
        if not method.no_wait:
            self.reply(m.ExchangeUnbindOk())

    # -- queues ----------------------------------------------------------------

    async def on_queue_declare(self, method: m.QueueDeclare) -> None:
        name = method.queue
        owner = self.connection
        if method.passive:
            queue = await self.vhost.placed(
                self.vhost.lookup(self.queue_names.resolve(name, method), owner))
        else:
            name = self.queue_names.to_declare(name, method)
            self.check("configure", name, "queue")
            new = self.vhost.queues.get(name) is None and self.vhost.stream(name) is None
            queue = await self.vhost.placed(self.vhost.declare_queue(
                name, durable=method.durable, exclusive=method.exclusive,
                auto_delete=method.auto_delete, arguments=method.arguments, owner=owner))
            await self.vhost.shared()
            if new and not method.exclusive:  # an exclusive queue lives as its connection
                self.audit("queues.create", name=name)
        self.queue_names.declared(queue.name)
        if not method.no_wait:
            counts = await queue.home_counts() if isinstance(queue, RemoteQueue) \
                else _counts(queue)
            self.reply(m.QueueDeclareOk(queue.name, *counts))

    def _audit_binding(self, action: str, source: str, destination: str, kind: str,
                       routing_key: str) -> None:
        self.audit(action, source=source, destination=destination, destination_type=kind,
                   routing_key=routing_key)

    def _queue_binding(self, method: m.QueueBind | m.QueueUnbind) -> Binding:
        queue = self.queue_names.resolve(method.queue, method)
        self.check("write", queue, "queue")
        self.check("read", method.exchange, "exchange")
        key = method.routing_key if method.queue or method.routing_key else queue
        self.check_topic(method.exchange, "read", key)
        return Binding(method.exchange, queue, "queue", key, method.arguments)

    async def on_queue_bind(self, method: m.QueueBind) -> None:
        self.vhost.lookup(self.queue_names.resolve(method.queue, method), self.connection)
        binding = self._queue_binding(method)
        self.vhost.bind(binding)
        await self.vhost.shared()
        self._audit_binding("bindings.create", binding.source, binding.destination, "queue",
                            binding.routing_key)
        if not method.no_wait:
            self.reply(m.QueueBindOk())

    async def on_queue_unbind(self, method: m.QueueUnbind) -> None:
        binding = self._queue_binding(method)
        self.vhost.unbind(binding, self.connection)
        await self.vhost.shared()
        self._audit_binding("bindings.delete", binding.source, binding.destination, "queue",
                            binding.routing_key)
        self.reply(m.QueueUnbindOk())

    def on_queue_purge(self, method: m.QueuePurge) -> Awaitable[None] | None:
        name = self.queue_names.resolve(method.queue, method)
        queue = self.vhost.lookup(name, self.connection)
        self.check("read", name, "queue")
        if isinstance(queue, RemoteQueue):
            return self._purge_at_home(queue, method)
        self._purged(method, queue.purge() if isinstance(queue, ClassicQueue) else 0)
        return None

    async def _purge_at_home(self, queue: RemoteQueue, method: m.QueuePurge) -> None:
        self._purged(method, await queue.purge_at_home())

    def _purged(self, method: m.QueuePurge, count: int) -> None:
        if not method.no_wait:
            self.reply(m.QueuePurgeOk(count))

    async def on_queue_delete(self, method: m.QueueDelete) -> None:
        """Our own consumers of the queue hear of its end after delete-ok, as in RabbitMQ."""
        name = self.queue_names.resolve(method.queue, method)
        self.check("configure", name, "queue")
        self.consumers.hold_notices()
        try:
            remote = self.vhost.queues.get(name)
            if isinstance(remote, RemoteQueue):
                await remote.before_delete()
            existed = remote is not None or self.vhost.stream(name) is not None
            count = await self.vhost.delete_queue(name, owner=self.connection,
                                                  if_unused=method.if_unused,
                                                  if_empty=method.if_empty)
            await self.vhost.shared()
            if existed:
                self.audit("queues.delete", name=name)
            self.connection.core.delivery_stats.forget(self.vhost.name, name)
            if not method.no_wait:
                self.reply(m.QueueDeleteOk(count))
        finally:
            for tag in self.consumers.release_notices():
                self._notify_cancel(tag)

    # -- consuming -------------------------------------------------------------

    def on_qos(self, method: m.BasicQos) -> None:
        self.reply(self.credit.qos(method))
        self.resume()

    def on_consume(self, method: m.BasicConsume) -> Awaitable[None] | None:
        name = self.queue_names.resolve(method.queue, method)
        queue = self.vhost.lookup(name, self.connection)
        self.check("read", name, "queue")
        tag = self.consumers.tag_for(method)
        limit = self.connection.ctx.limits.max_consumers_per_queue
        consumer: Consumer
        if isinstance(queue, Stream):
            if method.no_ack:
                raise PreconditionFailed(f"queue '{name}' in vhost '{self.vhost.name}' does "
                                         "not support no-ack consumers (stream queue)")
            consumer = StreamConsumer(self, queue, tag,
                                      self.credit.consumer_prefetch(stream=True),
                                      method.arguments.get("x-stream-offset"))
        else:
            if limit and len(queue.consumers) >= limit:
                raise PreconditionFailed(f"consumer limit of {limit} reached for queue '{name}'")
            consumer = QueueConsumer(self, queue, tag, no_ack=method.no_ack,
                                     exclusive=method.exclusive,
                                     prefetch=self.credit.consumer_prefetch(stream=False))
            if isinstance(queue, RemoteQueue):
                return self._consume_at_home(queue, consumer, method)
            try:
                queue.add_consumer(consumer)  # refuses a conflict before consume-ok
            except AccessRefused:
                raise self._in_exclusive_use(name, method) from None
        self._consuming(consumer, method)
        return None

    async def _consume_at_home(self, queue: RemoteQueue, consumer: QueueConsumer,
                               method: m.BasicConsume) -> None:
        try:
            await queue.subscribe(consumer)  # the home refuses a conflict before consume-ok
        except AccessRefused:
            raise self._in_exclusive_use(queue.name, method) from None
        if self.closing or self.ended or not self.credit.open:
            queue.remove_consumer(consumer)  # the channel closed meanwhile
            return
        self._consuming(consumer, method)

    def _in_exclusive_use(self, name: str, method: m.BasicConsume) -> ChannelError:
        return ChannelError(ReplyCode.ACCESS_REFUSED,
                            f"{self.vhost.describe('queue', name)} in exclusive use", method)

    def _consuming(self, consumer: Consumer, method: m.BasicConsume) -> None:
        tag = consumer.tag
        self.consumers.add(tag, consumer)
        if not method.no_wait:
            self.reply(m.BasicConsumeOk(tag))
        self.connection.ctx.add_consumer(tag, consumer.queue.name,
                                         prefetch_count=consumer.prefetch,
                                         ack_required=not consumer.no_ack, channel=self.number)
        if isinstance(consumer, QueueConsumer):
            consumer.start()  # deliveries follow consume-ok

    def on_cancel(self, method: m.BasicCancel) -> None:
        consumer = self.consumers.remove(method.consumer_tag)
        if consumer is not None:
            consumer.stop()
            self.connection.ctx.remove_consumer(method.consumer_tag)
        if not method.no_wait:
            self.reply(m.BasicCancelOk(method.consumer_tag))

    def consumer_cancelled(self, tag: str) -> None:
        """The queue went away: tell the client (consumer_cancel_notify)."""
        if self.consumers.remove(tag) is None:
            return
        self.connection.ctx.remove_consumer(tag)
        for notice in self.consumers.notices(tag):
            self._notify_cancel(notice)

    def _notify_cancel(self, tag: str) -> None:
        if self.connection.cancel_notify:
            self.reply(m.BasicCancel(tag, True))

    def on_get(self, method: m.BasicGet) -> Awaitable[None] | None:
        name = self.queue_names.resolve(method.queue, method)
        queue = self.vhost.lookup(name, self.connection)
        self.check("read", name, "queue")
        if isinstance(queue, Stream):
            raise AmqpCodecError(ReplyCode.NOT_IMPLEMENTED,
                                 f"basic.get not supported by stream queues queue '{name}' in "
                                 f"vhost '{self.vhost.name}'", method=method)
        if isinstance(queue, RemoteQueue):
            return self._get_at_home(queue, method)
        message = queue.get()
        if message is not None:
            if method.no_ack:
                queue.settle(message)
            else:
                queue.unacked_count += 1
        self._got(queue, method, message, queue.ready_count)
        return None

    async def _get_at_home(self, queue: RemoteQueue, method: m.BasicGet) -> None:
        message, ready = await queue.fetch(method.no_ack)  # settled there if no_ack
        if message is not None and not method.no_ack and not self.credit.open:
            queue.requeue([message])  # the channel closed meanwhile
            return
        self._got(queue, method, message, ready)

    def _got(self, queue: ClassicQueue, method: m.BasicGet, message: QueueMessage | None,
             ready: int) -> None:
        """Answer basic.get: get-empty, or get-ok with the message and `ready` left."""
        if message is None:
            self.stats.get_empty += 1
            self.reply(m.BasicGetEmpty())
            return
        for stats in (self.stats, queue.stats):
            stats.delivered(no_ack=method.no_ack, by_get=True, redelivered=message.redelivered)
        tag = self.deliveries.deliver(None if method.no_ack else _Delivery(None, queue, message))
        get_ok = m.BasicGetOk(tag, message.redelivered, message.exchange, message.routing_key,
                              ready)
        self.connection.send(encode_content(self.number, get_ok, message.properties,
                                            message.body, self.connection.frame_max))
        self.counted(queue.name, len(message.body))

    # -- acknowledgements --------------------------------------------------------

    def on_settle(self, method: Settle) -> None:
        tags = self.deliveries.tags_of(method)
        if not self.tx.hold_settle(method, tags):
            self._settle(method, self.deliveries.take(tags))

    def _settle(self, method: Settle, deliveries: list[_Delivery]) -> None:
        if isinstance(method, m.BasicAck):
            self.stats.ack += len(deliveries)
            for delivery in deliveries:
                if delivery.queue is not None and delivery.message is not None:
                    delivery.queue.ack(delivery.message)
        elif method.requeue:
            self._requeue(deliveries)
        else:
            for delivery in deliveries:
                if delivery.queue is not None and delivery.message is not None:
                    delivery.queue.reject(delivery.message)
        self._release(deliveries)

    def _release(self, deliveries: list[_Delivery]) -> None:
        for delivery in deliveries:
            if delivery.consumer is not None:
                delivery.consumer.settled()
        self.resume()

    def _requeue(self, deliveries: list[_Delivery]) -> None:
        by_queue: dict[ClassicQueue, list[QueueMessage]] = {}
        for delivery in deliveries:
            if delivery.queue is not None and delivery.message is not None:
                by_queue.setdefault(delivery.queue, []).append(delivery.message)
        for queue, messages in by_queue.items():
            if not queue.deleted:
                queue.requeue(messages)

    def on_recover(self, method: m.BasicRecover | m.BasicRecoverAsync) -> None:
        if not method.requeue:
            raise AmqpCodecError(ReplyCode.NOT_IMPLEMENTED, "requeue=false", method=method)
        deliveries = self.deliveries.take_all()
        self._requeue(deliveries)
        self._release(deliveries)
        if isinstance(method, m.BasicRecover):
            self.reply(m.BasicRecoverOk())

    # -- publishing ------------------------------------------------------------

    def on_publish(self, content: ContentMessage) -> None:
        method: m.BasicPublish = content.method  # type: ignore[assignment]
        if method.immediate:
            raise AmqpCodecError(ReplyCode.NOT_IMPLEMENTED, "immediate=true", method=method)
        exchange = method.exchange
        if exchange not in self._write_allowed:
            try:
                self.check("write", exchange or "amq.default", "exchange")
            except BrokerError as exc:
                raise broker_error(exc, method) from None
            self._write_allowed.add(exchange)
        try:
            self.check_topic(exchange, "write", method.routing_key)
        except BrokerError as exc:
            raise broker_error(exc, method) from None
        if self.tx.hold_publish(content):
            return
        try:
            outcome = self._publish(content, method)
        except BrokerError as exc:
            raise broker_error(exc, method) from None
        self.stats.publish += 1
        if self.confirms.enabled:
            self.stats.publish_confirm += 1
            self.confirms.published(outcome.waits, outcome.rejected)

    def _publish(self, content: ContentMessage, method: m.BasicPublish) -> PublishOutcome:
        raw = content.properties_raw
        try:
            facts = essentials(raw)
            headers = headers_of(raw) if facts.has_headers else None
        except (IndexError, ValueError) as exc:
            raise AmqpCodecError(ReplyCode.SYNTAX_ERROR,
                                 f"malformed content properties: {exc}") from None
        if raw[1] & 0x10:  # user-id present: it must be the authenticated user
            user_id = content.properties.user_id
            if user_id != self.connection.user.name:
                raise ChannelError(ReplyCode.PRECONDITION_FAILED,
                                   f"user_id property set to '{user_id}' but authenticated "
                                   f"user was '{self.connection.user.name}'", method)
        expires_at = None
        if facts.expiration is not None:
            if not facts.expiration.isdigit():
                raise ChannelError(ReplyCode.PRECONDITION_FAILED,
                                   f"invalid expiration '{facts.expiration}'", method)
            expires_at = time.monotonic() + int(facts.expiration) / 1000
        message = QueueMessage(method.exchange, method.routing_key, raw, content.body,
                               persistent=facts.persistent, priority=facts.priority,
                               expires_at=expires_at)
        cc = _cc(headers) if headers else ()
        outcome = self.vhost.publish(method.exchange, method.routing_key, message, headers,
                                     cc, to_stream_record,
                                     confirm=self.confirms.enabled or self.tx.enabled)
        if outcome.backlogs:
            self.connection.flow.hold(outcome.backlogs)
        if not outcome.routed:
            if not method.mandatory:
                self.stats.drop_unroutable += 1
                return outcome
            self.stats.return_unroutable += 1
            returned = m.BasicReturn(NO_ROUTE, "NO_ROUTE", method.exchange, method.routing_key)
            self.connection.send(encode_content(self.number, returned, raw, content.body,
                                                self.connection.frame_max))
        return outcome

    # -- publisher confirms ------------------------------------------------------

    def on_confirm_select(self, method: m.ConfirmSelect) -> None:
        answer = self.confirms.select(method, self.tx.enabled)
        if answer is not None:
            self.reply(answer)

    def flush_confirms(self) -> None:
        """Send this read's confirms once their messages are durable, in publish order:
        callbacks on the writes, no task per read."""
        waits = self.confirms.end_read()
        if waits is None:
            return
        pending = [wait for wait in waits if not wait.done()]
        for wait in pending:
            wait.add_done_callback(self._send_durable_confirms)
        if not pending:
            asyncio.get_running_loop().call_soon(self._send_durable_confirms)

    def _send_durable_confirms(self, _done: object = None) -> None:
        """Answer the oldest reads whose writes are all over (a later read waits for the
        ones before it)."""
        answers, confirmed = self.confirms.answer_over(_over, _failed)
        self.stats.confirm += confirmed
        for answer in answers:
            self.reply(answer)
        drained = self._confirms_drained
        if not self.confirms.waiting and drained is not None:
            self._confirms_drained = None
            if not drained.done():
                drained.set_result(None)

    async def confirms_sent(self) -> None:
        if self.confirms.waiting:
            if self._confirms_drained is None:
                self._confirms_drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._confirms_drained)  # a caller's timeout ends its wait only

    # -- transactions ------------------------------------------------------------

    def on_tx_select(self, method: m.TxSelect) -> None:
        self.reply(self.tx.select(method, self.confirms.enabled))

    async def on_tx_commit(self, method: m.TxCommit) -> None:
        """Apply the transaction's publishes and acks; commit-ok once they are durable."""
        publishes, settles = self.tx.commit(method)
        waits: list[Write] = []
        try:
            for content in publishes:
                waits += self._publish(content, content.method).waits  # type: ignore[arg-type]
        except BrokerError as exc:
            raise broker_error(exc, method) from None
        for settle, tags in settles:
            self._settle(settle, self.deliveries.take(tags))
        if waits:
            await asyncio.wait(waits)
        self.reply(m.TxCommitOk())

    def on_tx_rollback(self, method: m.TxRollback) -> None:
        self.reply(self.tx.rollback(method))


def _over(write: Write) -> bool:
    return write.done()


def _failed(write: Write) -> bool:
    return write.cancelled() or write.exception() is not None


def _counts(queue: ClassicQueue | Stream) -> tuple[int, int]:
    if isinstance(queue, ClassicQueue):
        return queue.ready_count, queue.consumer_count
    return 0, 0


def _cc(headers: dict[str, Any]) -> tuple[str, ...]:
    """Sender-selected distribution: extra routing keys in the CC and BCC headers."""
    keys: list[str] = []
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if isinstance(value, list):
            keys += [k if isinstance(k, str) else bytes(k).decode() for k in value
                     if isinstance(k, str | bytes)]
    return tuple(keys)
