// Scenarios with Node's amqplib (promise API): connection and channel lifecycle, every exchange
// type, queue and consumer options, acks and requeue ordering, prefetch, confirms, returns,
// RabbitMQ extensions, error replies by code, reconnect after a server close, large and empty
// messages. Prints one JSON line per scenario for conformance/run.
'use strict';
const amqp = require('amqplib');
const crypto = require('crypto');
const http = require('http');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const BROKER = args.broker;
const HTTP = args.http;
const scenarios = [];

function scenario(name, covers, fn, opts = {}) {
  scenarios.push({ name, covers, fn, target: opts.target || null, differs: opts.differs || null });
}
function eq(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: expected ${w}, got ${g}`);
}
function check(cond, what) { if (!cond) throw new Error(what); }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const name = (p) => `conf-node-${p}-${crypto.randomBytes(4).toString('hex')}`;

async function open() {
  const conn = await amqp.connect(BROKER);
  conn.on('error', () => {});
  return conn;
}
async function channel(conn, confirm = false) {
  const ch = confirm ? await conn.createConfirmChannel() : await conn.createChannel();
  ch.on('error', () => {});
  return ch;
}
/** Runs fn, expecting the broker to close the channel; returns the reply code. */
async function channelError(fn) {
  try { await fn(); } catch (e) { if (e.code) return e.code; throw e; }
  throw new Error('the channel was not closed');
}
async function body(ch, q) {
  const m = await ch.get(q, { noAck: true });
  return m ? m.content.toString() : null;
}
function api(method, path) {
  const u = new URL(BROKER.replace(/^amqp/, 'http'));
  const auth = Buffer.from(`${decodeURIComponent(u.username || 'guest')}:${decodeURIComponent(u.password || 'guest')}`).toString('base64');
  return new Promise((resolve, reject) => {
    const req = http.request(HTTP + path, { method, headers: { Authorization: `Basic ${auth}` } }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: data ? JSON.parse(data) : null }));
    });
    req.on('error', reject);
    req.end();
  });
}

scenario('connection_lifecycle', ['connection.start', 'connection.start-ok', 'connection.tune', 'connection.tune-ok',
  'connection.open', 'connection.open-ok', 'connection.close', 'connection.close-ok', 'ext:capabilities'], async () => {
  const conn = await open();
  const caps = conn.connection.serverProperties.capabilities;
  for (const c of ['publisher_confirms', 'exchange_exchange_bindings', 'basic.nack', 'consumer_cancel_notify',
    'connection.blocked', 'authentication_failure_close', 'per_consumer_qos', 'direct_reply_to']) {
    eq(caps[c], true, `capability ${c}`);
  }
  await conn.close();
});

scenario('bad_password_is_refused', ['connection.close', 'ext:authentication_failure_close'], async () => {
  const u = new URL(BROKER);
  u.password = 'wrong';
  try {
    await amqp.connect(u.toString());
  } catch (e) {
    check(/403|ACCESS_REFUSED|refused/i.test(String(e.message)), `a refusal, got ${e.message}`);
    return;
  }
  throw new Error('a bad password was accepted');
});

scenario('channel_lifecycle', ['channel.open', 'channel.open-ok', 'channel.close', 'channel.close-ok'], async () => {
  const conn = await open();
  const chans = [];
  for (let i = 0; i < 10; i++) chans.push(await channel(conn));
  for (const ch of chans) await ch.close();
  const ch = await channel(conn);
  await ch.assertQueue('', { exclusive: true });
  await conn.close();
});

scenario('every_exchange_type_routes', ['exchange.declare', 'exchange.declare-ok', 'queue.declare', 'queue.bind',
  'basic.publish', 'basic.get', 'basic.get-ok', 'basic.get-empty'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const a = (await ch.assertQueue('', { exclusive: true })).queue;
  const b = (await ch.assertQueue('', { exclusive: true })).queue;
  const d = name('direct'), f = name('fanout'), t = name('topic'), h = name('headers');
  await ch.assertExchange(d, 'direct', { autoDelete: true });
  await ch.assertExchange(f, 'fanout', { autoDelete: true });
  await ch.assertExchange(t, 'topic', { autoDelete: true });
  await ch.assertExchange(h, 'headers', { autoDelete: true });
  await ch.bindQueue(a, d, 'red');
  await ch.bindQueue(a, f, '');
  await ch.bindQueue(b, f, '');
  await ch.bindQueue(a, t, 'stock.*.nyse');
  await ch.bindQueue(b, t, 'stock.#');
  await ch.bindQueue(a, h, '', { 'x-match': 'all', kind: 'invoice', region: 'eu' });
  await ch.bindQueue(b, h, '', { 'x-match': 'any', kind: 'invoice', region: 'eu' });
  ch.publish(d, 'red', Buffer.from('d1'));
  ch.publish(d, 'blue', Buffer.from('d2'));
  ch.publish(f, 'x', Buffer.from('f'));
  ch.publish(t, 'stock.ibm.nyse', Buffer.from('t1'));
  ch.publish(t, 'stock.ibm.nasdaq.x', Buffer.from('t2'));
  ch.publish(h, '', Buffer.from('h1'), { headers: { kind: 'invoice', region: 'eu' } });
  ch.publish(h, '', Buffer.from('h2'), { headers: { kind: 'invoice', region: 'us' } });
  await ch.checkQueue(a);
  const gotA = [], gotB = [];
  for (let m; (m = await body(ch, a)) !== null;) gotA.push(m);
  for (let m; (m = await body(ch, b)) !== null;) gotB.push(m);
  eq(gotA, ['d1', 'f', 't1', 'h1'], 'queue a');
  eq(gotB, ['f', 't1', 't2', 'h1', 'h2'], 'queue b');
  await conn.close();
});

scenario('exchange_to_exchange_bindings', ['exchange.bind', 'exchange.bind-ok', 'exchange.unbind', 'exchange.unbind-ok',
  'ext:exchange-to-exchange'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const src = name('src'), dst = name('dst');
  await ch.assertExchange(src, 'topic');
  await ch.assertExchange(dst, 'fanout', { autoDelete: true });
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  await ch.bindQueue(q, dst, '');
  await ch.bindExchange(dst, src, 'a.#');
  ch.publish(src, 'a.b', Buffer.from('through'));
  ch.publish(src, 'b.a', Buffer.from('not'));
  await ch.checkQueue(q);
  eq(await body(ch, q), 'through', 'routed');
  eq(await body(ch, q), null, 'only matching');
  await ch.unbindExchange(dst, src, 'a.#');
  await ch.deleteExchange(src);
  await conn.close();
});

scenario('queue_options_and_errors', ['queue.declare', 'queue.purge', 'queue.purge-ok', 'queue.delete', 'queue.delete-ok',
  'queue.unbind', 'queue.unbind-ok', 'exchange.delete', 'exchange.delete-ok', 'channel.close'], async () => {
  const conn = await open();
  let ch = await channel(conn);
  const q = name('q');
  await ch.assertQueue(q);
  for (let i = 0; i < 3; i++) ch.sendToQueue(q, Buffer.from(`m${i}`));
  await ch.bindQueue(q, 'amq.direct', 'k');
  await ch.unbindQueue(q, 'amq.direct', 'k');
  eq((await ch.checkQueue(q)).messageCount, 3, 'count');
  eq(await channelError(() => ch.deleteQueue(q, { ifEmpty: true })), 406, 'if-empty');
  ch = await channel(conn);
  eq((await ch.purgeQueue(q)).messageCount, 3, 'purged');
  eq((await ch.deleteQueue(q)).messageCount, 0, 'deleted');
  eq(await channelError(() => ch.checkQueue(q)), 404, 'passive on a missing queue');
  ch = await channel(conn);
  eq(await channelError(() => ch.assertQueue('amq.reserved')), 403, 'amq. prefix');
  ch = await channel(conn);
  const x = name('x');
  await ch.assertExchange(x, 'direct');
  eq(await channelError(() => ch.assertExchange(x, 'fanout')), 406, 'inequivalent type');
  ch = await channel(conn);
  await ch.deleteExchange(x);
  eq(await channelError(() => ch.checkExchange(x)), 404, 'deleted exchange');
  const other = await open();
  ch = await channel(conn);
  const excl = (await ch.assertQueue(name('excl'), { exclusive: true })).queue;
  const och = await channel(other);
  eq(await channelError(() => och.checkQueue(excl)), 405, 'exclusive to its owner');
  await other.close();
  await conn.close();
});

scenario('requeued_messages_keep_their_place', ['basic.ack', 'basic.nack', 'basic.reject'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  for (let i = 1; i <= 4; i++) ch.sendToQueue(q, Buffer.from(String(i)));
  await ch.checkQueue(q);
  const m1 = await ch.get(q);
  const m2 = await ch.get(q);
  ch.nack(m2, false, true);
  ch.reject(m1, true);
  const got = [];
  for (let m; (m = await ch.get(q));) { got.push([m.content.toString(), m.fields.redelivered]); ch.ack(m); }
  eq(got, [['1', true], ['2', true], ['3', false], ['4', false]], 'order and flags');
  await conn.close();
});

scenario('prefetch_limits_unacked_deliveries', ['basic.qos', 'basic.qos-ok', 'basic.consume', 'basic.consume-ok',
  'basic.deliver', 'basic.cancel', 'basic.cancel-ok'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  for (let i = 0; i < 10; i++) ch.sendToQueue(q, Buffer.from(String(i)));
  await ch.prefetch(3);
  const got = [];
  const { consumerTag } = await ch.consume(q, (m) => got.push(m));
  await sleep(500);
  eq(got.length, 3, 'prefetch 3');
  ch.ack(got[2], true);
  for (let i = 0; i < 40 && got.length < 6; i++) await sleep(50);
  eq(got.map((m) => m.content.toString()), ['0', '1', '2', '3', '4', '5'], 'three more');
  await ch.cancel(consumerTag);
  await conn.close();
});

scenario('deleting_a_queue_cancels_its_consumers', ['basic.cancel', 'ext:consumer_cancel_notify'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const q = name('cancelled');
  await ch.assertQueue(q);
  let cancelled = false;
  await ch.consume(q, (m) => { if (m === null) cancelled = true; });
  const och = await channel(conn);
  await och.deleteQueue(q);
  for (let i = 0; i < 50 && !cancelled; i++) await sleep(50);
  check(cancelled, 'the consumer was told');
  await conn.close();
});

scenario('confirms_and_returns', ['confirm.select', 'confirm.select-ok', 'basic.ack', 'basic.nack', 'basic.return',
  'ext:publisher-confirms'], async () => {
  const conn = await open();
  const ch = await channel(conn, true);
  const q = name('confirmed');
  await ch.assertQueue(q, { durable: true });
  for (let i = 0; i < 50; i++) ch.sendToQueue(q, Buffer.from(String(i)), { persistent: true });
  await ch.waitForConfirms();
  eq((await ch.checkQueue(q)).messageCount, 50, 'confirmed and queued');
  const returned = [];
  ch.on('return', (m) => returned.push(m));
  ch.publish('', name('nowhere'), Buffer.from('lost'), { mandatory: true });
  await ch.waitForConfirms();
  eq(returned.map((m) => [m.fields.replyCode, m.content.toString()]), [[312, 'lost']], 'returned before the ack');
  const r = (await ch.assertQueue('', { exclusive: true, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } })).queue;
  const outcomes = await Promise.all(['kept', 'refused'].map((b) => new Promise((resolve) =>
    ch.sendToQueue(r, Buffer.from(b), {}, (err) => resolve(err ? 'nack' : 'ack')))));
  eq(outcomes, ['ack', 'nack'], 'reject-publish nacks');
  await ch.deleteQueue(q);
  await conn.close();
});

scenario('reconnect_after_a_server_close', ['connection.close', 'ext:management-close'], async () => {
  const tagName = name('closeme');
  const conn = await amqp.connect(BROKER, { clientProperties: { connection_name: tagName } });
  let closedWith = null;
  conn.on('error', (e) => { closedWith = e.code; });
  conn.on('close', (e) => { if (e && e.code) closedWith = e.code; });
  let target = null;
  for (let i = 0; i < 50 && !target; i++) {
    const { body: list } = await api('GET', '/api/connections');
    const c = (list || []).find((x) => (x.client_properties || {}).connection_name === tagName);
    target = c && c.name;
    if (!target) await sleep(200);
  }
  check(target, 'listed');
  eq((await api('DELETE', `/api/connections/${encodeURIComponent(target)}`)).status, 204, 'closed over HTTP');
  for (let i = 0; i < 100 && closedWith === null; i++) await sleep(50);
  eq(closedWith, 320, 'CONNECTION_FORCED');
  const again = await open();
  const ch = await channel(again);
  await ch.assertQueue('', { exclusive: true });
  await again.close();
});

scenario('large_and_empty_messages', ['basic.publish', 'basic.get-ok'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  const big = crypto.randomBytes(3 * 1024 * 1024 + 17);
  ch.sendToQueue(q, Buffer.alloc(0));
  ch.sendToQueue(q, big);
  await ch.checkQueue(q);
  eq((await ch.get(q, { noAck: true })).content.length, 0, 'empty');
  const m = await ch.get(q, { noAck: true });
  check(m && Buffer.compare(m.content, big) === 0, '3 MiB over many frames');
  await conn.close();
});

scenario('ttl_dead_lettering_priorities', ['ext:x-message-ttl', 'ext:dead-lettering', 'ext:x-death', 'ext:x-max-priority'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const dlq = (await ch.assertQueue('', { exclusive: true })).queue;
  const q = (await ch.assertQueue('', { exclusive: true, arguments: { 'x-message-ttl': 100, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dlq } })).queue;
  ch.sendToQueue(q, Buffer.from('expires'));
  await sleep(500);
  const m = await ch.get(dlq, { noAck: true });
  check(m, 'a dead letter');
  const death = m.properties.headers['x-death'][0];
  eq([death.reason, death.queue, death.count], ['expired', q, 1], 'x-death');
  const p = (await ch.assertQueue('', { exclusive: true, arguments: { 'x-max-priority': 5 } })).queue;
  for (const [b, prio] of [['low', 1], ['high', 5], ['mid', 3]]) ch.sendToQueue(p, Buffer.from(b), { priority: prio });
  await ch.checkQueue(p);
  eq([await body(ch, p), await body(ch, p), await body(ch, p)], ['high', 'mid', 'low'], 'priority order');
  await conn.close();
});

scenario('direct_reply_to', ['ext:direct-reply-to'], async () => {
  const conn = await open();
  const ch = await channel(conn);
  const server = (await ch.assertQueue('', { exclusive: true })).queue;
  const replies = [];
  await ch.consume('amq.rabbitmq.reply-to', (m) => replies.push(m.content.toString()), { noAck: true });
  ch.sendToQueue(server, Buffer.from('ping'), { replyTo: 'amq.rabbitmq.reply-to' });
  await ch.checkQueue(server);
  const req = await ch.get(server, { noAck: true });
  check(req.properties.replyTo.startsWith('amq.rabbitmq.reply-to.'), 'rewritten reply-to');
  ch.sendToQueue(req.properties.replyTo, Buffer.from('pong'));
  for (let i = 0; i < 50 && !replies.length; i++) await sleep(50);
  eq(replies, ['pong'], 'the reply');
  await conn.close();
});

class Skip extends Error {}

scenario('transactions', ['tx.select', 'tx.commit', 'tx.rollback'], async () => {
  throw new Skip('amqplib has no transactions API (tx.* are covered by the pika, Java and lapin suites)');
});

(async () => {
  for (const s of scenarios) {
    const t0 = Date.now();
    let status = 'passed', error = null;
    try {
      await s.fn();
    } catch (e) {
      status = e instanceof Skip ? 'skipped' : 'failed';
      error = e instanceof Skip ? e.message : String(e && e.stack ? e.stack : e);
    }
    console.log(JSON.stringify({ suite: 'amqplib', scenario: s.name, status, covers: s.covers, target: s.target,
      differs: s.differs, error, seconds: (Date.now() - t0) / 1000 }));
  }
  process.exit(0);
})();
