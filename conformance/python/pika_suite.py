"""Scenarios with Python's pika (BlockingConnection): connection and channel lifecycle, every
exchange type, queue and consumer options, acks and requeue ordering, prefetch, confirms,
transactions, returns, RabbitMQ extensions, error replies by code, reconnect after a server
close, large and empty messages. Raw-frame scenarios cover methods no client sends on its own
(connection.secure-ok, basic.recover-async)."""
import base64, json, os, socket, struct, sys, time, urllib.parse, urllib.request, uuid

import pika
from pika.exceptions import (AMQPConnectionError, ChannelClosedByBroker, ConnectionClosedByBroker,
                             UnroutableError)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenario import Skip, check, eq, main, scenario  # noqa: E402


class Ctx:
    def __init__(self, a):
        self.url = a.broker
        self.http = a.http.rstrip("/")
        self.params = pika.URLParameters(a.broker)

    def connect(self, **kw):
        params = pika.URLParameters(self.url)
        for k, v in kw.items():
            setattr(params, k, v)
        return pika.BlockingConnection(params)

    def channel(self):
        conn = self.connect()
        return conn, conn.channel()

    def api(self, method, path, body=None):
        u = urllib.parse.urlparse(self.url)
        auth = base64.b64encode(f"{u.username or 'guest'}:{u.password or 'guest'}".encode()).decode()
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.http + path, data=data, method=method,
                                     headers={"Authorization": "Basic " + auth,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read()
                return r.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            return e.code, None


def name(prefix):
    return f"conf-{prefix}-{uuid.uuid4().hex[:8]}"


def channel_error(fn):
    """Runs fn, expecting the broker to close the channel; returns the reply code."""
    try:
        fn()
    except ChannelClosedByBroker as e:
        return e.reply_code
    raise AssertionError("the channel was not closed")


def connection_error(conn, fn):
    """Runs fn, expecting the broker to close the whole connection; returns the reply code."""
    try:
        fn()
        deadline = time.time() + 5
        while time.time() < deadline:
            conn.process_data_events(time_limit=0.1)
    except ConnectionClosedByBroker as e:
        return e.reply_code
    raise AssertionError("the connection was not closed")


def get_body(ch, q):
    m, _, body = ch.basic_get(q, auto_ack=True)
    return body if m else None


@scenario("connection.start", "connection.start-ok", "connection.tune", "connection.tune-ok",
          "connection.open", "connection.open-ok", "connection.close", "connection.close-ok",
          "ext:capabilities")
def connection_lifecycle(c):
    conn = c.connect()
    props = conn._impl.server_properties
    caps = props.get("capabilities", {})
    for cap in ["publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "consumer_priorities",
                "authentication_failure_close", "per_consumer_qos", "direct_reply_to"]:
        eq(caps.get(cap), True, f"capability {cap}")
    check(props.get("version"), "a server version")
    check(conn.is_open, "open")
    conn.close()
    check(conn.is_closed, "closed")


@scenario("connection.close", "ext:authentication_failure_close")
def bad_password_is_refused(c):
    u = urllib.parse.urlparse(c.url)
    bad = u._replace(netloc=f"{u.username or 'guest'}:wrong@{u.hostname}:{u.port}").geturl()
    try:
        pika.BlockingConnection(pika.URLParameters(bad))
    except AMQPConnectionError as e:
        check("403" in repr(e) or "ACCESS_REFUSED" in repr(e) or "Authentication" in type(e).__name__,
              f"an authentication refusal, got {e!r}")
        return
    raise AssertionError("a bad password was accepted")


@scenario("connection.open", "connection.close")
def unknown_vhost_is_530(c):
    try:
        c.connect(virtual_host=name("novhost"))
    except ConnectionClosedByBroker as e:
        eq(e.reply_code, 530, "reply code")
        return
    except AMQPConnectionError as e:
        check("530" in repr(e) or "NOT_ALLOWED" in repr(e), f"530, got {e!r}")
        return
    raise AssertionError("an unknown vhost was accepted")


@scenario("connection.update-secret", "connection.update-secret-ok")
def update_secret(c):
    conn = c.connect()
    u = urllib.parse.urlparse(c.url)
    conn.update_secret(u.password or "guest", "rotation")
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    check(q.startswith("amq.gen-"), "still usable")
    conn.close()


@scenario("channel.open", "channel.open-ok", "channel.close", "channel.close-ok",
          "channel.flow", "channel.flow-ok")
def channel_lifecycle(c):
    conn = c.connect()
    chans = [conn.channel() for _ in range(20)]
    check(len({ch.channel_number for ch in chans}) == 20, "distinct channel numbers")
    eq(chans[0].flow(True), True, "flow active=true")
    for ch in chans:
        ch.close()
    ch = conn.channel()
    check(ch.is_open, "a channel after closing others")
    conn.close()


@scenario("channel.flow", "connection.close")
def channel_flow_off_is_refused(c):
    conn, ch = c.channel()
    eq(connection_error(conn, lambda: ch.flow(False)), 540, "flow active=false (a connection error)")


@scenario("exchange.declare", "exchange.declare-ok", "queue.declare", "queue.declare-ok",
          "queue.bind", "queue.bind-ok", "basic.publish", "basic.get", "basic.get-ok",
          "basic.get-empty")
def every_exchange_type_routes(c):
    conn, ch = c.channel()
    qs = {k: ch.queue_declare("", exclusive=True).method.queue for k in ["a", "b"]}
    d, f, t, h = name("direct"), name("fanout"), name("topic"), name("headers")
    ch.exchange_declare(d, "direct", auto_delete=True)
    ch.exchange_declare(f, "fanout", auto_delete=True)
    ch.exchange_declare(t, "topic", auto_delete=True)
    ch.exchange_declare(h, "headers", auto_delete=True)
    ch.queue_bind(qs["a"], d, "red")
    ch.queue_bind(qs["a"], f)
    ch.queue_bind(qs["b"], f)
    ch.queue_bind(qs["a"], t, "stock.*.nyse")
    ch.queue_bind(qs["b"], t, "stock.#")
    ch.queue_bind(qs["a"], h, arguments={"x-match": "all", "kind": "invoice", "region": "eu"})
    ch.queue_bind(qs["b"], h, arguments={"x-match": "any", "kind": "invoice", "region": "eu"})
    ch.basic_publish(d, "red", b"direct-red")
    ch.basic_publish(d, "blue", b"direct-blue")
    eq(get_body(ch, qs["a"]), b"direct-red", "direct")
    eq(get_body(ch, qs["a"]), None, "direct mismatch dropped")
    ch.basic_publish(f, "anything", b"fan")
    eq((get_body(ch, qs["a"]), get_body(ch, qs["b"])), (b"fan", b"fan"), "fanout")
    ch.basic_publish(t, "stock.ibm.nyse", b"t1")
    ch.basic_publish(t, "stock.ibm.nasdaq.x", b"t2")
    eq(get_body(ch, qs["a"]), b"t1", "topic *")
    eq((get_body(ch, qs["b"]), get_body(ch, qs["b"])), (b"t1", b"t2"), "topic #")
    eq(get_body(ch, qs["a"]), None, "topic * matches one word")
    ch.basic_publish(h, "", b"h1", pika.BasicProperties(headers={"kind": "invoice", "region": "eu"}))
    ch.basic_publish(h, "", b"h2", pika.BasicProperties(headers={"kind": "invoice", "region": "us"}))
    eq(get_body(ch, qs["a"]), b"h1", "headers all")
    eq(get_body(ch, qs["a"]), None, "headers all needs every header")
    eq((get_body(ch, qs["b"]), get_body(ch, qs["b"])), (b"h1", b"h2"), "headers any")
    conn.close()


@scenario("exchange.declare", "exchange.delete", "exchange.delete-ok", "channel.close")
def exchange_passive_and_delete(c):
    conn, ch = c.channel()
    eq(channel_error(lambda: ch.exchange_declare(name("missing"), "direct", passive=True)), 404, "passive")
    ch = conn.channel()
    x = name("x")
    ch.exchange_declare(x, "direct")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, "k")
    eq(channel_error(lambda: ch.exchange_delete(x, if_unused=True)), 406, "if-unused with a binding")
    ch = conn.channel()
    ch.exchange_delete(x)
    eq(channel_error(lambda: ch.exchange_declare(x, "direct", passive=True)), 404, "deleted")
    ch = conn.channel()
    eq(channel_error(lambda: ch.exchange_declare(name("amq.x").replace("conf-", "amq."), "direct")), 403,
       "amq. prefix")
    conn.close()


@scenario("exchange.declare", "channel.close", target="3.13",
          differs="RabbitMQ 3.10 closes the connection with 503 COMMAND_INVALID")
def unknown_exchange_type_is_406(c):
    conn, ch = c.channel()
    eq(channel_error(lambda: ch.exchange_declare(name("odd"), "no-such-type")), 406, "unknown type")
    conn.close()


@scenario("exchange.bind", "exchange.bind-ok", "exchange.unbind", "exchange.unbind-ok",
          "ext:exchange-to-exchange")
def exchange_to_exchange_bindings(c):
    conn, ch = c.channel()
    src, dst = name("src"), name("dst")
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "fanout", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, dst)
    ch.exchange_bind(dst, src, "a.#")
    ch.basic_publish(src, "a.b", b"through")
    ch.basic_publish(src, "b.a", b"not")
    eq(get_body(ch, q), b"through", "routed through the binding")
    eq(get_body(ch, q), None, "only matching keys")
    ch.exchange_unbind(dst, src, "a.#")
    ch.basic_publish(src, "a.b", b"after")
    eq(get_body(ch, q), None, "unbound")
    ch.exchange_delete(src)
    conn.close()


@scenario("queue.declare", "queue.purge", "queue.purge-ok", "queue.delete", "queue.delete-ok",
          "queue.unbind", "queue.unbind-ok")
def queue_options(c):
    conn, ch = c.channel()
    server_named = ch.queue_declare("", exclusive=True).method.queue
    check(server_named.startswith("amq.gen-"), f"server-named {server_named}")
    q = name("q")
    ok = ch.queue_declare(q)
    eq(ok.method.message_count, 0, "fresh queue")
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    ch.queue_bind(q, "amq.direct", "k")
    ch.queue_unbind(q, "amq.direct", "k")
    ch.basic_publish("amq.direct", "k", b"unbound")
    eq(ch.queue_declare(q, passive=True).method.message_count, 3, "passive count")
    eq(channel_error(lambda: ch.queue_delete(q, if_empty=True)), 406, "if-empty")
    ch = conn.channel()
    eq(ch.queue_purge(q).method.message_count, 3, "purged")
    ch.basic_publish("", q, b"again")
    eq(ch.queue_delete(q).method.message_count, 1, "deleted with its message")
    eq(channel_error(lambda: ch.queue_declare(q, passive=True)), 404, "gone")
    conn.close()


@scenario("queue.declare", "channel.close")
def exclusive_and_auto_delete_queues(c):
    conn, ch = c.channel()
    q = ch.queue_declare(name("excl"), exclusive=True).method.queue
    other, och = c.channel()
    eq(channel_error(lambda: och.queue_declare(q, passive=True)), 405, "exclusive to its owner")
    ad = ch.queue_declare(name("ad"), auto_delete=True).method.queue
    tag = ch.basic_consume(ad, lambda *a: None)
    ch.basic_cancel(tag)
    och = other.channel()
    eq(channel_error(lambda: och.queue_declare(ad, passive=True)), 404, "auto-deleted after the last consumer")
    conn.close()
    och = other.channel()
    eq(channel_error(lambda: och.queue_declare(q, passive=True)), 404, "exclusive queue gone with its owner")
    other.close()


@scenario("queue.declare", "channel.close")
def inequivalent_redeclare_is_406(c):
    conn, ch = c.channel()
    q = name("durable")
    ch.queue_declare(q, durable=True)
    eq(channel_error(lambda: ch.queue_declare(q, durable=False)), 406, "durable mismatch")
    ch = conn.channel()
    ch.queue_delete(q)
    conn.close()


@scenario("basic.ack", "basic.nack", "basic.reject", "basic.get")
def requeued_messages_keep_their_place(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(1, 6):
        ch.basic_publish("", q, b"%d" % i)
    m1, _, b1 = ch.basic_get(q)
    m2, _, b2 = ch.basic_get(q)
    eq((b1, b2), (b"1", b"2"), "in order")
    ch.basic_nack(m2.delivery_tag, requeue=True)
    ch.basic_reject(m1.delivery_tag, requeue=True)
    got = []
    while True:
        m, _, body = ch.basic_get(q)
        if m is None:
            break
        got.append((body, m.redelivered))
        ch.basic_ack(m.delivery_tag)
    eq(got, [(b"1", True), (b"2", True), (b"3", False), (b"4", False), (b"5", False)], "order and flags")
    m, _, _ = ch.basic_get(q)
    eq(m, None, "all acked")
    ch.basic_publish("", q, b"x")
    m, _, _ = ch.basic_get(q)
    ch.basic_reject(m.delivery_tag, requeue=False)
    eq(ch.queue_declare(q, passive=True).method.message_count, 0, "rejected without requeue is dropped")
    conn.close()


@scenario("basic.ack", "channel.close")
def unknown_delivery_tag_is_406(c):
    conn, ch = c.channel()
    eq(channel_error(lambda: (ch.basic_ack(99), ch.queue_declare("", exclusive=True))), 406, "unknown tag")
    conn.close()


@scenario("basic.qos", "basic.qos-ok", "basic.consume", "basic.consume-ok", "basic.deliver",
          "basic.cancel", "basic.cancel-ok")
def prefetch_limits_unacked_deliveries(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=3)
    got = []
    tag = ch.basic_consume(q, lambda ch_, m, p, body: got.append((m.delivery_tag, body)))
    deadline = time.time() + 2
    while time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    eq(len(got), 3, "prefetch 3")
    ch.basic_ack(got[-1][0], multiple=True)
    deadline = time.time() + 2
    while time.time() < deadline and len(got) < 6:
        conn.process_data_events(time_limit=0.1)
    eq([b for _, b in got], [b"%d" % i for i in range(6)], "three more after a multiple ack")
    ch.basic_cancel(tag)
    conn.close()


@scenario("basic.consume", "basic.cancel", "ext:consumer_cancel_notify")
def deleting_a_queue_cancels_its_consumers(c):
    conn, ch = c.channel()
    q = name("cancelled")
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    other, och = c.channel()
    och.queue_delete(q)
    deadline = time.time() + 5
    while time.time() < deadline and not cancelled:
        conn.process_data_events(time_limit=0.1)
    eq(cancelled, [tag], "basic.cancel from the server")
    other.close()
    conn.close()


@scenario("confirm.select", "confirm.select-ok", "basic.ack", "basic.return", "ext:publisher-confirms")
def confirms_and_returns(c):
    conn, ch = c.channel()
    ch.confirm_delivery()
    q = name("confirmed")
    ch.queue_declare(q, durable=True)
    for i in range(50):
        ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    eq(ch.queue_declare(q, passive=True).method.message_count, 50, "all confirmed and queued")
    try:
        ch.basic_publish("", name("nowhere"), b"lost", mandatory=True)
        raise AssertionError("an unroutable mandatory message was not returned")
    except UnroutableError as e:
        eq(len(e.messages), 1, "one returned message")
        eq(e.messages[0].method.reply_code, 312, "NO_ROUTE")
        eq(e.messages[0].body, b"lost", "body")
    ch.queue_delete(q)
    eq(channel_error(lambda: ch.basic_publish(name("missing"), "k", b"x")), 404, "missing exchange")
    conn.close()


@scenario("tx.select", "tx.select-ok", "tx.commit", "tx.commit-ok", "tx.rollback", "tx.rollback-ok")
def transactions(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.tx_select()
    ch.basic_publish("", q, b"rolled-back")
    eq(ch.queue_declare(q, passive=True).method.message_count, 0, "nothing before commit")
    ch.tx_rollback()
    ch.basic_publish("", q, b"committed")
    ch.tx_commit()
    eq(ch.queue_declare(q, passive=True).method.message_count, 1, "committed")
    m, _, body = ch.basic_get(q)
    eq(body, b"committed", "the committed one")
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()
    ch.close()
    ch = conn.channel()
    eq(ch.queue_declare(q, passive=True).method.message_count, 1,
       "a rolled-back ack left it unacked, so closing the channel requeued it")
    conn.close()


@scenario("tx.select", "confirm.select", "channel.close")
def confirm_and_tx_do_not_mix(c):
    conn, ch = c.channel()
    ch.tx_select()
    eq(channel_error(ch.confirm_delivery), 406, "confirm after tx")
    conn.close()


@scenario("basic.recover", "basic.recover-ok")
def recover_requeues_unacked(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"again")
    m, _, _ = ch.basic_get(q)
    eq(m.redelivered, False, "first delivery")
    ch.basic_recover(requeue=True)
    m, _, body = ch.basic_get(q)
    eq((body, m.redelivered), (b"again", True), "redelivered after recover")
    conn.close()


@scenario("basic.recover", "connection.close")
def recover_without_requeue_is_refused(c):
    conn, ch = c.channel()
    eq(connection_error(conn, lambda: ch.basic_recover(requeue=False)), 540, "requeue=false (a connection error)")


@scenario("queue.declare", "channel.close")
def error_codes(c):
    conn, ch = c.channel()
    eq(channel_error(lambda: ch.queue_declare("amq.reserved")), 403, "amq. prefix")
    ch = conn.channel()
    eq(channel_error(lambda: ch.queue_bind(name("missing"), "amq.direct", "k")), 404, "missing queue")
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    eq(channel_error(lambda: ch.queue_bind(q, "", q)), 403, "binding to the default exchange")
    conn.close()


@scenario("connection.close", "ext:management-close")
def reconnect_after_a_server_close(c):
    conn = c.connect(client_properties={"connection_name": name("closeme")})
    conn_name = conn._impl.params.client_properties["connection_name"]
    deadline, target = time.time() + 10, None
    while time.time() < deadline and target is None:
        status, conns = c.api("GET", "/api/connections")
        target = next((x["name"] for x in conns or []
                       if x.get("client_properties", {}).get("connection_name") == conn_name), None)
        time.sleep(0.2)
    check(target, "the connection is listed")
    status, _ = c.api("DELETE", "/api/connections/" + urllib.parse.quote(target, safe=""))
    eq(status, 204, "closed over HTTP")
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            conn.process_data_events(time_limit=0.2)
        raise AssertionError("the connection was not closed")
    except ConnectionClosedByBroker as e:
        eq(e.reply_code, 320, "CONNECTION_FORCED")
    again, ch = c.channel()
    check(ch.queue_declare("", exclusive=True).method.queue, "a new connection works")
    again.close()


@scenario("basic.publish", "basic.get-ok")
def large_and_empty_messages(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    big = os.urandom(3 * 1024 * 1024 + 17)
    for body in [b"", big, b"x"]:
        ch.basic_publish("", q, body)
    eq(get_body(ch, q), b"", "empty")
    eq(get_body(ch, q), big, "3 MiB over many frames")
    eq(get_body(ch, q), b"x", "after the big one")
    conn.close()


@scenario("ext:x-message-ttl", "ext:per-message-ttl", "ext:dead-lettering", "ext:x-death")
def ttl_and_dead_lettering(c):
    conn, ch = c.channel()
    dlq = ch.queue_declare("", exclusive=True).method.queue
    q = ch.queue_declare("", exclusive=True, arguments={
        "x-message-ttl": 100, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}).method.queue
    ch.basic_publish("", q, b"expires")
    ch.basic_publish("", dlq, b"direct", pika.BasicProperties(expiration="0"))
    time.sleep(0.5)
    m, props, body = ch.basic_get(dlq, auto_ack=True)
    check(m is not None, "a dead letter")
    eq(body, b"expires", "the expired message (the per-message expiration=0 one expired)")
    death = props.headers["x-death"][0]
    eq((death["reason"], death["queue"], death["count"]), ("expired", q, 1), "x-death")
    eq(get_body(ch, dlq), None, "nothing else")
    conn.close()


@scenario("ext:dead-lettering", "ext:x-last-death", target="3.13",
          differs="RabbitMQ 3.10 sets x-first-death-* but no x-last-death-* headers")
def last_death_headers(c):
    conn, ch = c.channel()
    dlq = ch.queue_declare("", exclusive=True).method.queue
    q = ch.queue_declare("", exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}).method.queue
    ch.basic_publish("", q, b"rejected")
    m, _, _ = ch.basic_get(q)
    ch.basic_reject(m.delivery_tag, requeue=False)
    time.sleep(0.3)
    m, props, _ = ch.basic_get(dlq, auto_ack=True)
    check(m is not None, "a dead letter")
    h = props.headers
    eq((h.get("x-first-death-reason"), h.get("x-first-death-queue")), ("rejected", q), "x-first-death-*")
    eq((h.get("x-last-death-reason"), h.get("x-last-death-queue")), ("rejected", q), "x-last-death-*")
    conn.close()


@scenario("ext:health-ready-to-serve-clients", target="4.1",
          differs="RabbitMQ 3.10 has no /api/health/checks/ready-to-serve-clients (404)")
def ready_to_serve_clients(c):
    status, body = c.api("GET", "/api/health/checks/ready-to-serve-clients")
    eq(status, 200, "ready")
    eq((body or {}).get("status"), "ok", "status ok")


@scenario("ext:x-max-length", "ext:x-overflow")
def max_length_drops_or_rejects(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 2}).method.queue
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    eq((get_body(ch, q), get_body(ch, q), get_body(ch, q)), (b"2", b"3", None), "drop-head")
    r = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", r, b"kept")
    try:
        ch.basic_publish("", r, b"refused")
        raise AssertionError("the publish over the limit was confirmed")
    except pika.exceptions.NackError:
        pass
    conn.close()


@scenario("ext:x-max-priority")
def priorities(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-priority": 5}).method.queue
    for body, prio in [(b"low", 1), (b"high", 5), (b"none", None), (b"mid", 3)]:
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    eq([get_body(ch, q) for _ in range(4)], [b"high", b"mid", b"low", b"none"], "by priority")
    conn.close()


@scenario("ext:alternate-exchange")
def alternate_exchange(c):
    conn, ch = c.channel()
    ae, x = name("ae"), name("main")
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.exchange_declare(x, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ae)
    ch.basic_publish(x, "unbound-key", b"caught")
    eq(get_body(ch, q), b"caught", "unroutable went to the alternate exchange")
    conn.close()


@scenario("ext:direct-reply-to")
def direct_reply_to(c):
    conn, ch = c.channel()
    server_q = ch.queue_declare("", exclusive=True).method.queue
    replies = []
    ch.basic_consume("amq.rabbitmq.reply-to", lambda ch_, m, p, body: replies.append(body), auto_ack=True)
    ch.basic_publish("", server_q, b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    m, props, body = ch.basic_get(server_q, auto_ack=True)
    check(props.reply_to.startswith("amq.rabbitmq.reply-to."), f"rewritten reply-to {props.reply_to}")
    ch.basic_publish("", props.reply_to, b"pong")
    deadline = time.time() + 5
    while time.time() < deadline and not replies:
        conn.process_data_events(time_limit=0.1)
    eq(replies, [b"pong"], "the reply")
    conn.close()


@scenario("ext:single-active-consumer")
def single_active_consumer(c):
    conn, ch = c.channel()
    q = ch.queue_declare(name("sac"), arguments={"x-single-active-consumer": True}).method.queue
    first, second = [], []
    ch.basic_consume(q, lambda ch_, m, p, body: first.append(body), auto_ack=True)
    ch.basic_consume(q, lambda ch_, m, p, body: second.append(body), auto_ack=True)
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    deadline = time.time() + 3
    while time.time() < deadline and len(first) + len(second) < 4:
        conn.process_data_events(time_limit=0.1)
    eq((len(first), len(second)), (4, 0), "one active consumer gets everything")
    ch.queue_delete(q)
    conn.close()


@scenario("ext:consumer-priority")
def consumer_priorities(c):
    conn, ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    low, high = [], []
    ch.basic_consume(q, lambda ch_, m, p, body: low.append(body), auto_ack=True, arguments={"x-priority": 0})
    ch.basic_consume(q, lambda ch_, m, p, body: high.append(body), auto_ack=True, arguments={"x-priority": 10})
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    deadline = time.time() + 3
    while time.time() < deadline and len(low) + len(high) < 5:
        conn.process_data_events(time_limit=0.1)
    eq((len(high), len(low)), (5, 0), "the higher-priority consumer gets everything it can take")
    conn.close()


@scenario("ext:x-expires")
def unused_queues_expire(c):
    conn, ch = c.channel()
    q = ch.queue_declare(name("expiring"), arguments={"x-expires": 300}).method.queue
    time.sleep(1.2)
    eq(channel_error(lambda: ch.queue_declare(q, passive=True)), 404, "deleted after 300 ms unused")
    conn.close()


@scenario("ext:quorum-queues", "ext:x-delivery-count", target="3.13",
          differs="RabbitMQ 3.10 sets x-delivery-count already on the first delivery")
def quorum_delivery_count(c):
    conn, ch = c.channel()
    q = name("quorum")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"retry")
    m, props, _ = ch.basic_get(q)
    check("x-delivery-count" not in (props.headers or {}), "absent on the first delivery")
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, props, _ = ch.basic_get(q)
    eq((props.headers or {}).get("x-delivery-count"), 1, "counted on redelivery")
    ch.basic_ack(m.delivery_tag)
    ch.queue_delete(q)
    conn.close()


@scenario("ext:sender-selected-distribution")
def cc_and_bcc(c):
    conn, ch = c.channel()
    a = ch.queue_declare("", exclusive=True).method.queue
    b = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", a, b"copy", pika.BasicProperties(headers={"BCC": [b]}))
    eq(get_body(ch, a), b"copy", "to the routing key")
    m, props, body = ch.basic_get(b, auto_ack=True)
    eq(body, b"copy", "and the BCC")
    check("BCC" not in (props.headers or {}), "BCC stripped")
    conn.close()


def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def read_frame(sock):
    head = b""
    while len(head) < 7:
        chunk = sock.recv(7 - len(head))
        if not chunk:
            return None
        head += chunk
    kind, channel, size = struct.unpack(">BHI", head)
    body = b""
    while len(body) < size + 1:
        chunk = sock.recv(size + 1 - len(body))
        if not chunk:
            return None
        body += chunk
    return kind, channel, body[:-1]


def shortstr(s):
    return bytes([len(s)]) + s


def raw_session(c):
    """A socket past connection.open (PLAIN as guest), for methods no client sends."""
    u = urllib.parse.urlparse(c.url)
    sock = socket.create_connection((u.hostname, u.port or 5672), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    read_frame(sock)  # start
    user, pw = (u.username or "guest").encode(), (u.password or "guest").encode()
    resp = b"\x00" + user + b"\x00" + pw
    start_ok = struct.pack(">HH", 10, 11) + struct.pack(">I", 0) + shortstr(b"PLAIN") + \
        struct.pack(">I", len(resp)) + resp + shortstr(b"en_US")
    sock.sendall(frame(1, 0, start_ok))
    _, _, tune = read_frame(sock)
    channel_max, frame_max, _ = struct.unpack(">HIH", tune[4:12])
    sock.sendall(frame(1, 0, struct.pack(">HHHIH", 10, 31, channel_max, frame_max, 0)))
    vhost = urllib.parse.unquote(u.path[1:] or "/") if u.path not in ("", "/") else "/"
    sock.sendall(frame(1, 0, struct.pack(">HH", 10, 40) + shortstr(vhost.encode()) + b"\x00\x00"))
    read_frame(sock)  # open-ok
    return sock


def method_ids(f):
    return struct.unpack(">HH", f[2][:4]) if f and f[0] == 1 else None


@scenario("connection.secure", "connection.secure-ok")
def secure_ok_without_secure_is_refused(c):
    u = urllib.parse.urlparse(c.url)
    sock = socket.create_connection((u.hostname, u.port or 5672), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    read_frame(sock)
    resp = b"\x00guest\x00guest"
    sock.sendall(frame(1, 0, struct.pack(">HH", 10, 21) + struct.pack(">I", len(resp)) + resp))
    # The broker never sends connection.secure for PLAIN; an unsolicited secure-ok ends the
    # connection (a close or the socket shut).
    try:
        f = read_frame(sock)
    except ConnectionResetError:
        f = None
    check(f is None or method_ids(f) == (10, 50), f"closed, got {f!r}")
    sock.close()


@scenario("basic.recover-async")
def recover_async_requeues(c):
    sock = raw_session(c)
    sock.sendall(frame(1, 1, struct.pack(">HH", 20, 10) + b"\x00"))
    eq(method_ids(read_frame(sock)), (20, 11), "channel.open-ok")
    # basic.recover-async requeue=true: no reply is defined; a following channel.close still
    # gets its close-ok, so the broker is still talking to us.
    sock.sendall(frame(1, 1, struct.pack(">HH", 60, 100) + b"\x01"))
    sock.sendall(frame(1, 1, struct.pack(">HH", 20, 40) + struct.pack(">H", 200) + shortstr(b"bye")
                       + struct.pack(">HH", 0, 0)))
    eq(method_ids(read_frame(sock)), (20, 41), "channel.close-ok after recover-async")
    sock.close()


if __name__ == "__main__":
    sys.exit(main("pika", Ctx))
