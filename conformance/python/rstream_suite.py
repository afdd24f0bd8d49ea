"""Python `rstream` against RabbitMQ's stream protocol (#19): publish with confirms, consume
from every offset type, deduplication by publisher name, server-side offset tracking, super
streams and single active consumer. Run by conformance/run with --stream HOST:PORT (the
broker's stream listener); prints one JSON line per scenario as the other suites do."""
import argparse, asyncio, json, os, sys, time, traceback, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenario import SCENARIOS, Skip, check, eq, scenario  # noqa: E402

from rstream import (AMQPMessage, amqp_decoder, Consumer, ConsumerOffsetSpecification, OffsetNotFound,  # noqa: E402
                     OffsetSpecification, OffsetType, Producer, RouteType,
                     SuperStreamConsumer, SuperStreamCreationOption, SuperStreamProducer)

STEP = 10.0


class Ctx:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def kw(self):
        return dict(host=self.host, port=self.port, username="guest", password="guest")

    def name(self, what):
        return f"rstream-{what}-{uuid.uuid4().hex[:8]}"


class Reader:
    """A consumer whose deliveries are collected as (offset, body)."""

    def __init__(self, ctx, **subscribe):
        subscribe.setdefault("decoder", amqp_decoder)
        self.ctx, self.subscribe, self.got, self.task = ctx, subscribe, [], None
        self.consumer = Consumer(**ctx.kw())

    async def on_message(self, msg, context):
        self.got.append((context.offset, bytes(msg.body).decode()))

    async def start(self, stream):
        await self.consumer.start()
        await self.consumer.subscribe(stream, self.on_message, **self.subscribe)
        self.task = asyncio.create_task(self.consumer.run())
        return self

    async def wait_for(self, n, what):
        end = time.time() + STEP
        while len(self.got) < n and time.time() < end:
            await asyncio.sleep(0.02)
        check(len(self.got) >= n, f"{what}: {n} deliveries, got {self.got}")
        return self.got

    async def close(self):
        await self.consumer.close()
        if self.task:
            self.task.cancel()


def bodies(got):
    return [b for _, b in got]


def with_id(text, publishing_id):
    m = AMQPMessage(body=text.encode())
    m.publishing_id = publishing_id
    return m


async def last_id(ctx, stream, publisher):
    async with Producer(**ctx.kw()) as p:
        return await (await p.default_client).query_publisher_sequence(stream, publisher)


async def publish(ctx, stream, texts, publisher_name=None):
    async with Producer(**ctx.kw()) as p:
        for t in texts:
            await p.send_wait(stream, AMQPMessage(body=t.encode()), publisher_name=publisher_name)


@scenario("stream:create", "stream:publish", "stream:subscribe")
async def publish_with_confirms_and_consume_from_every_offset_type(ctx):
    stream = ctx.name("offsets")
    async with Producer(**ctx.kw()) as p:
        await p.create_stream(stream)
    await publish(ctx, stream, [f"m{i}" for i in range(10)])
    first = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)).start(stream)
    got = await first.wait_for(10, "from first")
    eq(bodies(got)[:10], [f"m{i}" for i in range(10)], "from first")
    eq([o for o, _ in got[:10]], list(range(10)), "offsets")
    at = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.OFFSET, 6)).start(stream)
    got = await at.wait_for(4, "from offset 6")
    eq(bodies(got)[-4:], ["m6", "m7", "m8", "m9"], "from offset 6")
    last = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.LAST)).start(stream)
    got = await last.wait_for(1, "from last")
    eq(bodies(got)[-1], "m9", "the last chunk ends with the last message")
    since = int(time.time() * 1000) - 60_000
    ts = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.TIMESTAMP, since)).start(stream)
    await ts.wait_for(10, "from a timestamp a minute ago")
    nxt = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT)).start(stream)
    await asyncio.sleep(0.3)
    eq(nxt.got, [], "next: nothing old")
    await publish(ctx, stream, ["m10"])
    got = await nxt.wait_for(1, "next")
    eq(got, [(10, "m10")], "next: the new one")
    for r in (first, at, last, ts, nxt):
        await r.close()
    async with Producer(**ctx.kw()) as p:
        await p.delete_stream(stream)


@scenario("stream:deduplication", "stream:query_publisher_sequence")
async def a_named_publisher_is_deduplicated(ctx):
    stream = ctx.name("dedup")
    async with Producer(**ctx.kw()) as p:
        await p.create_stream(stream)
        batch = [with_id(f"d{i}", i) for i in range(1, 6)]
        for m in batch:
            await p.send_wait(stream, m, publisher_name="orders")
    eq(await last_id(ctx, stream, "orders"), 5, "the last publishing id")
    async with Producer(**ctx.kw()) as p:
        again = [with_id(f"d{i}", i) for i in range(3, 8)]
        for m in again:
            await p.send_wait(stream, m, publisher_name="orders")
    eq(await last_id(ctx, stream, "orders"), 7, "after more")
    r = await Reader(ctx).start(stream)
    await r.wait_for(7, "every id once")
    await asyncio.sleep(0.3)
    eq(bodies(r.got), [f"d{i}" for i in range(1, 8)], "ids 3-5 were not stored twice")
    await r.close()
    async with Producer(**ctx.kw()) as p:
        await p.delete_stream(stream)


@scenario("stream:store_offset", "stream:query_offset")
async def offsets_are_tracked_by_the_server(ctx):
    stream = ctx.name("tracking")
    async with Producer(**ctx.kw()) as p:
        await p.create_stream(stream)
    await publish(ctx, stream, [f"t{i}" for i in range(5)])
    c = Consumer(**ctx.kw())
    await c.start()
    try:
        await c.query_offset(stream, "billing")
        raise AssertionError("an offset where none was stored")
    except OffsetNotFound:
        pass
    await c.store_offset(stream, "billing", 3)
    end = time.time() + STEP
    while time.time() < end:
        try:
            if await c.query_offset(stream, "billing") == 3:
                break
        except OffsetNotFound:
            pass
        await asyncio.sleep(0.05)
    eq(await c.query_offset(stream, "billing"), 3, "the stored offset")
    await c.close()
    async with Producer(**ctx.kw()) as p:
        await p.delete_stream(stream)


@scenario("stream:create_super_stream", "stream:partitions", "stream:route", target="3.13",
          differs="RabbitMQ 3.10's stream protocol has no CreateSuperStream (3.13)")
async def a_super_stream_spreads_messages_over_its_partitions(ctx):
    name = ctx.name("super")
    keys = [f"k{i}" for i in range(30)]

    async def key_of(m):
        return m.application_properties["key"]

    async with SuperStreamProducer(**ctx.kw(), super_stream=name, routing=RouteType.Hash,
                                   super_stream_creation_option=SuperStreamCreationOption(n_partitions=3),
                                   routing_extractor=key_of) as p:
        for k in keys:
            await p.send(AMQPMessage(body=k.encode(), application_properties={"key": k}))
    got = []
    c = SuperStreamConsumer(**ctx.kw(), super_stream=name)
    await c.start()

    async def on_message(msg, context):
        got.append(bytes(msg.body).decode())

    await c.subscribe(on_message, decoder=amqp_decoder, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    task = asyncio.create_task(c.run())
    end = time.time() + STEP
    while len(got) < len(keys) and time.time() < end:
        await asyncio.sleep(0.05)
    eq(sorted(got), sorted(keys), "every message once, through the super stream consumer")
    await c.close()
    task.cancel()
    # Each partition read on its own: the keys spread over them, each key on one.
    seen = []
    for i in range(3):
        r = await Reader(ctx, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)).start(f"{name}-{i}")
        await asyncio.sleep(0.5)
        seen.append(bodies(r.got))
        await r.close()
    eq(sorted(b for part in seen for b in part), sorted(keys), "the partitions hold every key once")
    check(sum(1 for part in seen if part) >= 2, f"spread over partitions: {seen}")


@scenario("stream:single_active_consumer", "stream:consumer_update", target="3.11",
          differs="RabbitMQ 3.10 has no single active consumer on streams (3.11)")
async def a_single_active_consumer_fails_over(ctx):
    stream = ctx.name("sac")
    async with Producer(**ctx.kw()) as p:
        await p.create_stream(stream)
    updates = []

    def listener(tag, offset):
        async def on_update(active, event_context):
            updates.append((tag, active))
            return OffsetSpecification(OffsetType.OFFSET, offset)
        return on_update

    props = {"single-active-consumer": "true", "name": "invoicing"}
    one = await Reader(ctx, properties=dict(props), consumer_update_listener=listener("one", 0)).start(stream)
    two = await Reader(ctx, properties=dict(props), consumer_update_listener=listener("two", 5)).start(stream)
    await publish(ctx, stream, [f"s{i}" for i in range(5)])
    await one.wait_for(5, "the active one")
    await asyncio.sleep(0.3)
    eq(two.got, [], "the other waits")
    eq(updates, [("one", True)], "only the first was told it is active")
    await one.close()
    await publish(ctx, stream, [f"s{i}" for i in range(5, 8)])
    got = await two.wait_for(3, "the next takes over")
    eq(bodies(got)[-3:], ["s5", "s6", "s7"], "from the offset it answered with")
    eq(updates, [("one", True), ("two", True)], "then the second")
    await two.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker")
    ap.add_argument("--http")
    ap.add_argument("--stream", required=True, help="HOST:PORT of the stream listener")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    host, _, port = a.stream.rpartition(":")
    only = set(filter(None, a.only.split(",")))
    for s in SCENARIOS:
        if only and s["name"] not in only:
            continue
        t0 = time.time()
        status, error = "passed", None
        try:
            asyncio.run(asyncio.wait_for(s["fn"](Ctx(host, int(port))), 60))
        except Skip as e:
            status, error = "skipped", str(e)
        except BaseException as e:  # noqa: BLE001 - a scenario's failure is data here
            status = "failed"
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        print(json.dumps({"suite": "rstream", "scenario": s["name"], "status": status,
                          "covers": s["covers"], "target": s["target"], "differs": s["differs"],
                          "error": error, "seconds": round(time.time() - t0, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
