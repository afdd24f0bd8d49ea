// Connections and channels: paged lists, a connection's page (client properties, TLS,
// its channels) with close, and a channel's page (prefetch, unacked, its consumers).

import {h, fill, section, field, facts, table, link, num, rate, json} from './dom.js';
import {api, seg} from './api.js';
import {me, attempt} from './state.js';
import {pagedList} from './paged.js';

const CONNECTION_COLUMNS = [
  ['Virtual host', c => c.vhost, {sort: 'vhost'}],
  ['Name', c => link(['connections', c.name], c.name), {sort: 'name'}],
  ['User', c => c.user, {sort: 'user'}],
  ['State', c => c.state, {sort: 'state'}],
  ['TLS', c => c.ssl ? 'yes' : 'no'],
  ['Protocol', c => c.protocol],
  ['Channels', c => num(c.channels), {num: true, sort: 'channels'}],
  ['From client', c => rate(c.recv_oct_details), {num: true, sort: 'recv_oct_details.rate'}],
  ['To client', c => rate(c.send_oct_details), {num: true, sort: 'send_oct_details.rate'}],
];

const CHANNEL_COLUMNS = [
  ['Channel', c => link(['channels', c.name], c.name), {sort: 'name'}],
  ['Virtual host', c => c.vhost, {sort: 'vhost'}],
  ['User', c => c.user, {sort: 'user'}],
  ['Mode', c => [c.confirm ? 'C' : '', c.transactional ? 'T' : ''].join('')],
  ['Prefetch', c => num(c.prefetch_count), {num: true, sort: 'prefetch_count'}],
  ['Unacked', c => num(c.messages_unacknowledged), {num: true, sort: 'messages_unacknowledged'}],
  ['Consumers', c => num(c.consumer_count), {num: true, sort: 'consumer_count'}],
  ['Publish', c => rate(c.message_stats && c.message_stats.publish_details), {num: true}],
  ['Deliver / get', c => rate(c.message_stats && c.message_stats.deliver_get_details), {num: true}],
];

export async function renderList(main, _args, params) {
  const list = h('div', {id: 'connections'});
  fill(main, h('h1', {}, 'Connections'), list);
  const refresh = pagedList(list, {path: '/connections', routeParts: ['connections'], params, columns: CONNECTION_COLUMNS, what: 'connections'});
  await refresh();
  return refresh;
}

export async function renderChannels(main, _args, params) {
  const list = h('div', {id: 'channels'});
  fill(main, h('h1', {}, 'Channels'), list);
  const refresh = pagedList(list, {path: '/channels', routeParts: ['channels'], params, columns: CHANNEL_COLUMNS, what: 'channels'});
  await refresh();
  return refresh;
}

export async function renderChannel(main, [name]) {
  const details = h('div', {id: 'channel-details'});
  const consumers = h('div', {id: 'channel-consumers'});
  fill(main, h('h1', {}, 'Channel ', h('span', {class: 'name'}, name)), details, section('Consumers', consumers));
  const refresh = async () => {
    const c = await api('GET', `/channels/${seg(name)}`);
    const conn = c.connection_details || {};
    fill(details, facts([
      ['Connection', link(['connections', conn.name], conn.name)], ['Virtual host', c.vhost], ['User', c.user],
      ['State', c.state], ['Prefetch', num(c.prefetch_count)], ['Global prefetch', num(c.global_prefetch_count)],
      ['Unacked', num(c.messages_unacknowledged)], ['Unconfirmed', num(c.messages_unconfirmed)],
      ['Confirm mode', String(c.confirm)], ['Transactional', String(c.transactional)],
      ['Publish', rate(c.message_stats && c.message_stats.publish_details)],
      ['Deliver / get', rate(c.message_stats && c.message_stats.deliver_get_details)],
      ['Ack', rate(c.message_stats && c.message_stats.ack_details)],
    ]));
    const all = await api('GET', '/consumers');
    fill(consumers, table([
      ['Queue', x => x.queue ? link(['queues', x.queue.vhost, x.queue.name], x.queue.name) : ''],
      ['Consumer tag', x => x.consumer_tag], ['Ack required', x => String(x.ack_required)],
      ['Exclusive', x => String(x.exclusive)], ['Prefetch', x => num(x.prefetch_count), {num: true}],
    ], all.filter(x => x.channel_details && x.channel_details.name === name), {empty: 'No consumers.'}));
  };
  await refresh();
  return refresh;
}

export async function renderOne(main, [name]) {
  const base = `/connections/${seg(name)}`;
  const details = h('div', {id: 'connection-details'});
  const client = h('div', {id: 'connection-client'});
  const channels = h('div', {id: 'connection-channels'});
  fill(main, h('h1', {}, 'Connection ', h('span', {class: 'name'}, name)), details,
    section('Client properties', client), section('Channels', channels));
  if (me.act) {
    const reason = h('input', {id: 'close-reason', value: 'Closed via management plugin'});
    main.appendChild(section('Close this connection', h('form', {id: 'close-connection', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('DELETE', base, undefined, {'X-Reason': reason.value});
        window.location.hash = '#/connections';
      });
    }}, field('Reason', reason), h('button', {type: 'submit', class: 'danger'}, 'Force close'))));
  }
  const refresh = async () => {
    const c = await api('GET', base);
    fill(details, facts([
      ['Virtual host', c.vhost], ['User', c.user], ['State', c.state], ['Protocol', c.protocol],
      ['Client', `${c.peer_host}:${c.peer_port}`], ['Connected at', c.connected_at ? new Date(c.connected_at).toISOString() : ''],
      ['Heartbeat', `${c.timeout} s`], ['Frame max', num(c.frame_max)], ['Channel max', num(c.channel_max)],
      ['Authentication', c.auth_mechanism], ['TLS', c.ssl ? c.ssl_protocol : 'no'],
      ...(c.ssl ? [['Cipher', c.ssl_cipher], ['Key exchange', c.ssl_key_exchange], ['MAC', c.ssl_hash]] : []),
      ...(c.peer_cert_subject ? [['Peer certificate subject', c.peer_cert_subject],
        ['Peer certificate issuer', c.peer_cert_issuer], ['Peer certificate validity', c.peer_cert_validity]] : []),
    ]));
    fill(client, json(c.client_properties));
    fill(channels, table(CHANNEL_COLUMNS, await api('GET', `${base}/channels`), {empty: 'No channels.'}));
  };
  await refresh();
  return refresh;
}
