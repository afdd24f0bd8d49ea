// Queues: the paged list with the add form, and a queue's page (details, consumers,
// bindings, publish, get, peek, purge, delete).

import {h, fill, section, field, facts, table, link, num, rate, bytes, json, route} from './dom.js';
import {api, seg} from './api.js';
import {me, attempt, notice} from './state.js';
import {pagedList} from './paged.js';
import {argumentsEditor, QUEUE_HELPERS, vhostSelect, publishForm, messagesView} from './forms.js';
import {liveChart} from './chart.js';

const COLUMNS = [
  ['Virtual host', q => q.vhost, {sort: 'vhost'}],
  ['Name', q => link(['queues', q.vhost, q.name], q.name), {sort: 'name'}],
  ['Type', q => q.type, {sort: 'type'}],
  ['State', q => q.state, {sort: 'state'}],
  ['Ready', q => num(q.messages_ready), {num: true, sort: 'messages_ready'}],
  ['Unacked', q => num(q.messages_unacknowledged), {num: true, sort: 'messages_unacknowledged'}],
  ['Total', q => num(q.messages), {num: true, sort: 'messages'}],
  ['Consumers', q => num(q.consumers), {num: true, sort: 'consumers'}],
  ['Incoming', q => rate(q.message_stats && q.message_stats.publish_details), {num: true, sort: 'message_stats.publish_details.rate'}],
  ['Deliver / get', q => rate(q.message_stats && q.message_stats.deliver_get_details), {num: true, sort: 'message_stats.deliver_get_details.rate'}],
];

const WANTED = 'vhost,name,type,state,messages,messages_ready,messages_unacknowledged,consumers,message_stats';

export async function renderList(main, _args, params) {
  const list = h('div', {id: 'queues'});
  fill(main, h('h1', {}, 'Queues'), list);
  const refresh = pagedList(list, {path: '/queues', routeParts: ['queues'], params, columns: COLUMNS, what: 'queues', extra: {columns: WANTED}});
  if (me.act) main.appendChild(section('Add a new queue', await addForm()));
  await refresh();
  return refresh;
}

async function addForm() {
  const vhost = await vhostSelect('queue-vhost');
  const type = h('select', {id: 'queue-type'}, ['classic', 'quorum', 'stream'].map(t => h('option', {value: t}, t)));
  const name = h('input', {id: 'queue-name', required: true});
  const durable = h('select', {id: 'queue-durable'}, h('option', {value: 'true'}, 'Durable'), h('option', {value: 'false'}, 'Transient'));
  const autoDelete = h('select', {id: 'queue-auto-delete'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  const args = argumentsEditor(QUEUE_HELPERS);
  return h('form', {id: 'add-queue', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      const arguments_ = {...args.value()};
      if (type.value !== 'classic') arguments_['x-queue-type'] = type.value;
      await api('PUT', `/queues/${seg(vhost.value)}/${seg(name.value)}`,
        {durable: durable.value === 'true', auto_delete: autoDelete.value === 'true', arguments: arguments_});
      window.location.hash = route(['queues', vhost.value, name.value]);
    });
  }},
  field('Virtual host', vhost), field('Type', type), field('Name', name), field('Durability', durable),
  field('Auto delete', autoDelete), args, h('button', {type: 'submit', id: 'add-queue-submit'}, 'Add queue'));
}

export async function renderOne(main, [vhost, name]) {
  const base = `/queues/${seg(vhost)}/${seg(name)}`;
  const details = h('div', {id: 'queue-details'});
  const consumers = h('div', {id: 'queue-consumers'});
  const bindings = h('div', {id: 'queue-bindings'});
  const r = k => q => q.message_stats && q.message_stats[k + '_details'] ? q.message_stats[k + '_details'].rate : 0;
  const queued = liveChart('queue-chart-queued', 'Queued messages', [
    ['Ready', q => q.messages_ready], ['Unacked', q => q.messages_unacknowledged], ['Total', q => q.messages]]);
  const rates = liveChart('queue-chart-rates', 'Message rates (per second)', [
    ['Publish', r('publish')], ['Deliver / get', r('deliver_get')], ['Ack', r('ack')], ['Redeliver', r('redeliver')]]);
  fill(main, h('h1', {}, 'Queue ', h('span', {class: 'name', id: 'queue-title'}, name)),
    h('p', {class: 'crumbs'}, 'Virtual host ', vhost),
    h('div', {class: 'charts'}, queued, rates),
    details, section('Consumers', consumers), section('Bindings', bindings));
  // A stream is read from offsets: get, peek, purge and moving do not apply (540 over AMQP).
  const stream = (await api('GET', base)).type === 'stream';
  if (me.act) {
    main.append(
      section('Add binding from an exchange', bindForm(vhost, name)),
      section('Publish message', publishForm(vhost, '', name)),
      stream ? null : section('Get or peek messages', messageForms(base)),
      stream ? null : section('Move messages', moveForm(vhost, name)),
      stream ? null : section('Purge', h('button', {type: 'button', id: 'purge', onclick: () => {
        if (!confirm(`Purge every ready message of queue ${name}?`)) return;
        attempt(async () => { await api('DELETE', `${base}/contents`); notice('Queue purged.'); await refresh(); });
      }}, 'Purge messages')),
      section('Delete', h('button', {type: 'button', id: 'delete', class: 'danger', onclick: () => {
        if (!confirm(`Delete queue ${name}?`)) return;
        attempt(async () => { await api('DELETE', base); window.location.hash = '#/queues'; });
      }}, 'Delete queue')));
  }
  const refresh = async () => {
    const q = await api('GET', base);
    queued.push(q);
    rates.push(q);
    fill(details, facts([
      ['Type', q.type], ['State', q.state], ['Durable', String(q.durable)], ['Auto delete', String(q.auto_delete)],
      ['Exclusive', String(!!q.exclusive)], ['Arguments', json(q.arguments)], q.policy ? ['Policy', q.policy] : null,
      ['Ready', h('span', {id: 'queue-ready'}, num(q.messages_ready))], ['Unacked', num(q.messages_unacknowledged)],
      ['Total', h('span', {id: 'queue-total'}, num(q.messages))],
      ['Message body bytes', bytes(q.message_bytes)],
      q.messages_paged_out !== undefined ? ['Paged out', num(q.messages_paged_out)] : null,
      ['Incoming', rate(q.message_stats && q.message_stats.publish_details)],
      ['Deliver / get', rate(q.message_stats && q.message_stats.deliver_get_details)],
      ['Ack', rate(q.message_stats && q.message_stats.ack_details)],
      q.leader ? ['Leader', q.leader] : null, q.node ? ['Node', q.node] : null,
      Array.isArray(q.members) ? ['Members', q.members.join(', ')] : null,
      Array.isArray(q.online) ? ['Online', q.online.join(', ')] : null,
      ...(q.type === 'stream' ? [
        ['First offset', h('span', {id: 'stream-first'}, String(q.first_offset ?? ''))],
        ['Last offset', h('span', {id: 'stream-last'}, q.last_offset == null ? 'empty' : String(q.last_offset))],
        ['Committed chunk', q.committed_offset == null ? 'none' : String(q.committed_offset)],
        ['Segments', num(q.segments)],
        ['Readers', Object.entries(q.readers || {}).map(([n, r]) => `${n}: ${r}`).join(', ')],
      ] : []),
    ]));
    fill(consumers, table([
      ['Channel', c => c.channel_details ? c.channel_details.name : ''],
      ['Consumer tag', c => c.consumer_tag],
      ['Ack required', c => String(c.ack_required)],
      ['Prefetch', c => num(c.prefetch_count), {num: true}],
      ['Active', c => String(c.active !== false)],
    ], q.consumer_details || [], {empty: 'No consumers.'}));
    const bs = await api('GET', `${base}/bindings`);
    fill(bindings, table([
      ['From', b => b.source || '(AMQP default)'],
      ['Routing key', b => b.routing_key],
      ['Arguments', b => json(b.arguments)],
      ['', b => me.act && b.source ? h('button', {type: 'button', class: 'link unbind', onclick: () => attempt(async () => {
        await api('DELETE', `/bindings/${seg(vhost)}/e/${seg(b.source)}/q/${seg(name)}/${seg(b.properties_key)}`);
        await refresh();
      })}, 'Unbind') : ''],
    ], bs, {empty: 'No bindings.'}));
  };
  function bindForm() {
    const source = h('input', {id: 'bind-source', required: true});
    const key = h('input', {id: 'bind-key'});
    const args = argumentsEditor();
    return h('form', {id: 'bind', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('POST', `/bindings/${seg(vhost)}/e/${seg(source.value)}/q/${seg(name)}`, {routing_key: key.value, arguments: args.value()});
        await refresh();
      });
    }}, field('From exchange', source), field('Routing key', key), args, h('button', {type: 'submit', id: 'bind-submit'}, 'Bind'));
  }
  await refresh();
  return refresh;
}

/** RabbitMQ's "Move messages": a dynamic shovel that moves what the queue holds now to
 * another queue of the same vhost, then deletes itself. */
function moveForm(vhost, name) {
  const dest = h('input', {id: 'move-destination', required: true});
  return h('form', {id: 'move', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      const uri = 'amqp:///' + encodeURIComponent(vhost);
      await api('PUT', `/parameters/shovel/${seg(vhost)}/${seg('Move from ' + name)}`, {
        component: 'shovel', vhost, name: 'Move from ' + name,
        value: {'src-uri': uri, 'src-queue': name, 'src-protocol': 'amqp091', 'src-prefetch-count': 1000,
          'src-delete-after': 'queue-length', 'dest-protocol': 'amqp091', 'dest-uri': uri,
          'dest-add-forward-headers': false, 'ack-mode': 'on-confirm', 'dest-queue': dest.value},
      });
      notice(`Moving the messages of ${name} to ${dest.value}.`);
    });
  }}, h('p', {class: 'hint'}, 'Moves the messages in the queue now to another queue of this virtual host, with a shovel that deletes itself when done.'),
  field('Destination queue', dest), h('button', {type: 'submit', id: 'move-submit'}, 'Move messages'));
}

function messageForms(base) {
  const out = h('div', {id: 'messages-out', 'aria-live': 'polite'});
  const count = h('input', {id: 'get-count', type: 'number', min: 1, value: 1});
  const ackmode = h('select', {id: 'get-ackmode'},
    [['ack_requeue_true', 'Nack message requeue true'], ['reject_requeue_true', 'Reject requeue true'],
      ['ack_requeue_false', 'Automatic ack'], ['reject_requeue_false', 'Reject requeue false']]
      .map(([v, t]) => h('option', {value: v}, t)));
  const encoding = h('select', {id: 'get-encoding'}, h('option', {value: 'auto'}, 'Automatic string/base64'), h('option', {value: 'base64'}, 'base64'));
  const truncate = h('input', {id: 'get-truncate', type: 'number', min: 1, value: 50000});
  const peek = () => attempt(async () => {
    const q = new URLSearchParams({count: count.value, encoding: encoding.value, truncate: truncate.value});
    fill(out, h('p', {class: 'hint'}, 'Peeked: the messages are still in the queue, in the same order.'),
      messagesView(await api('GET', `${base}/peek?${q}`)));
  });
  return h('div', {},
    h('form', {id: 'get', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        const got = await api('POST', `${base}/get`, {count: Number(count.value), ackmode: ackmode.value, encoding: encoding.value, truncate: Number(truncate.value)});
        fill(out, messagesView(got));
      });
    }},
    field('Ack mode', ackmode), field('Encoding', encoding), field('Messages', count), field('Truncate (bytes)', truncate),
    h('div', {class: 'buttons'},
      h('button', {type: 'submit', id: 'get-submit'}, 'Get messages'),
      h('button', {type: 'button', id: 'peek-submit', onclick: peek}, 'Peek'))),
    out);
}
