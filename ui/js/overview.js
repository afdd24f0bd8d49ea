// The overview: live charts of queued messages and message rates, totals, the nodes with
// their resources and alarms, listeners, and definitions export and import.

import {h, fill, section, field, table, num, rate, bytes} from './dom.js';
import {api} from './api.js';
import {me, attempt, notice} from './state.js';
import {liveChart} from './chart.js';

export async function render(main) {
  const queued = liveChart('chart-queued', 'Queued messages', [
    ['Ready', o => o.queue_totals && o.queue_totals.messages_ready],
    ['Unacked', o => o.queue_totals && o.queue_totals.messages_unacknowledged],
    ['Total', o => o.queue_totals && o.queue_totals.messages],
  ]);
  const r = k => o => o.message_stats && o.message_stats[k + '_details'] ? o.message_stats[k + '_details'].rate : 0;
  const rates = liveChart('chart-rates', 'Message rates (per second)', [
    ['Publish', r('publish')], ['Confirm', r('confirm')], ['Deliver', r('deliver_get')],
    ['Ack', r('ack')], ['Redeliver', r('redeliver')],
  ]);
  const totals = h('div', {id: 'totals', class: 'totals'});
  const nodes = h('div', {id: 'nodes'});
  const listeners = h('div', {id: 'listeners'});
  fill(main, h('h1', {}, 'Overview'), h('p', {class: 'crumbs', id: 'cluster-name'}),
    h('div', {class: 'charts'}, queued, rates), section('Totals', totals), section('Nodes', nodes),
    section('Ports and contexts', listeners), me.admin ? section('Cluster name', renameCluster()) : null,
    me.admin ? section('Export and import definitions', definitions()) : null);
  const refresh = async () => {
    const o = await api('GET', '/overview');
    fill(main.querySelector('#cluster-name'), `Cluster ${o.cluster_name}, ${o.product_name} ${o.product_version} (RabbitMQ ${o.rabbitmq_version})`);
    queued.push(o);
    rates.push(o);
    const t = o.object_totals || {};
    fill(totals, [['Connections', t.connections], ['Channels', t.channels], ['Exchanges', t.exchanges], ['Queues', t.queues], ['Consumers', t.consumers],
      ['Ready', o.queue_totals && o.queue_totals.messages_ready], ['Unacked', o.queue_totals && o.queue_totals.messages_unacknowledged],
      ['Publish', rate(o.message_stats && o.message_stats.publish_details)], ['Deliver', rate(o.message_stats && o.message_stats.deliver_get_details)]]
      .map(([k, v]) => h('div', {class: 'total'}, h('span', {class: 'label'}, k), h('span', {class: 'value'}, num(v)))));
    fill(listeners, table([['Protocol', l => l.protocol], ['Bound to', l => l.ip_address], ['Port', l => l.port, {num: true}]], o.listeners || []));
    let ns = [];
    try { ns = await api('GET', '/nodes'); } catch { ns = []; }
    fill(nodes, table([
      ['Name', n => n.name],
      ['Memory', n => `${bytes(n.mem_used)} of ${bytes(n.mem_limit)}`, {num: true}],
      ['Disk free', n => `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)})`, {num: true}],
      ['File descriptors', n => `${num(n.fd_used)} / ${num(n.fd_total)}`, {num: true}],
      ['Uptime', n => n.uptime ? `${Math.floor(n.uptime / 60000)} min` : '', {num: true}],
      ['Alarms', n => [n.mem_alarm ? 'memory' : '', n.disk_free_alarm ? 'disk' : ''].filter(Boolean).join(', ') || 'none'],
      ['Running', n => String(n.running !== false)],
    ], ns, {empty: 'Node details need the monitoring or administrator tag.'}));
  };
  await refresh();
  return refresh;
}

// Sets the cluster's name (PUT /api/cluster-name, administrators only, as in RabbitMQ).
function renameCluster() {
  const name = h('input', {id: 'cluster-name-input', required: true});
  return h('form', {id: 'cluster-rename', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      await api('PUT', '/cluster-name', {name: name.value});
      notice(`The cluster is now called ${name.value}.`);
    });
  }}, field('New name', name), h('button', {type: 'submit'}, 'Rename'));
}

function definitions() {
  const file = h('input', {id: 'definitions-file', type: 'file', accept: 'application/json,.json'});
  return h('div', {class: 'definitions'},
    h('button', {type: 'button', id: 'definitions-export', onclick: () => attempt(async () => {
      const defs = await api('GET', '/definitions');
      const a = h('a', {href: URL.createObjectURL(new Blob([JSON.stringify(defs, null, 2)], {type: 'application/json'})), download: 'warren-definitions.json'});
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    })}, 'Download definitions'),
    h('form', {id: 'definitions-import', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        if (!file.files.length) throw new Error('Choose a definitions file first.');
        await api('POST', '/definitions', JSON.parse(await file.files[0].text()));
        notice('Definitions imported.');
      });
    }}, field('Definitions file', file), h('button', {type: 'submit'}, 'Upload definitions')));
}
