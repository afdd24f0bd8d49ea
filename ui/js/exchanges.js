// Exchanges: the paged list with the add form, and an exchange's page (details, bindings
// from it with add and remove, publish, delete).

import {h, fill, section, field, facts, table, link, rate, json, route} from './dom.js';
import {api, seg} from './api.js';
import {me, attempt} from './state.js';
import {pagedList} from './paged.js';
import {argumentsEditor, EXCHANGE_HELPERS, vhostSelect, publishForm} from './forms.js';

const TYPES = ['direct', 'fanout', 'topic', 'headers', 'x-consistent-hash', 'x-delayed-message'];

const COLUMNS = [
  ['Virtual host', x => x.vhost, {sort: 'vhost'}],
  ['Name', x => link(['exchanges', x.vhost, x.name || 'amq.default'], x.name || '(AMQP default)'), {sort: 'name'}],
  ['Type', x => x.type, {sort: 'type'}],
  ['Features', x => [x.durable ? 'D' : '', x.auto_delete ? ' AD' : '', x.internal ? ' I' : ''].join('')],
  ['Message rate in', x => rate(x.message_stats && x.message_stats.publish_in_details), {num: true, sort: 'message_stats.publish_in_details.rate'}],
  ['Message rate out', x => rate(x.message_stats && x.message_stats.publish_out_details), {num: true, sort: 'message_stats.publish_out_details.rate'}],
];

export async function renderList(main, _args, params) {
  const list = h('div', {id: 'exchanges'});
  fill(main, h('h1', {}, 'Exchanges'), list);
  const refresh = pagedList(list, {path: '/exchanges', routeParts: ['exchanges'], params, columns: COLUMNS, what: 'exchanges'});
  if (me.act) main.appendChild(section('Add a new exchange', await addForm()));
  await refresh();
  return refresh;
}

async function addForm() {
  const vhost = await vhostSelect('exchange-vhost');
  const name = h('input', {id: 'exchange-name', required: true});
  const type = h('select', {id: 'exchange-type'}, TYPES.map(t => h('option', {value: t}, t)));
  const durable = h('select', {id: 'exchange-durable'}, h('option', {value: 'true'}, 'Durable'), h('option', {value: 'false'}, 'Transient'));
  const autoDelete = h('select', {id: 'exchange-auto-delete'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  const internal = h('select', {id: 'exchange-internal'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  const args = argumentsEditor(EXCHANGE_HELPERS);
  return h('form', {id: 'add-exchange', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      await api('PUT', `/exchanges/${seg(vhost.value)}/${seg(name.value)}`, {
        type: type.value, durable: durable.value === 'true', auto_delete: autoDelete.value === 'true',
        internal: internal.value === 'true', arguments: args.value(),
      });
      window.location.hash = route(['exchanges', vhost.value, name.value]);
    });
  }},
  field('Virtual host', vhost), field('Name', name), field('Type', type), field('Durability', durable),
  field('Auto delete', autoDelete), field('Internal', internal), args,
  h('button', {type: 'submit', id: 'add-exchange-submit'}, 'Add exchange'));
}

export async function renderOne(main, [vhost, name]) {
  const base = `/exchanges/${seg(vhost)}/${seg(name)}`;
  const details = h('div', {id: 'exchange-details'});
  const bindings = h('div', {id: 'exchange-bindings'});
  const isDefault = name === 'amq.default' || name === '';
  fill(main, h('h1', {}, 'Exchange ', h('span', {class: 'name'}, isDefault ? '(AMQP default)' : name)),
    h('p', {class: 'crumbs'}, 'Virtual host ', vhost), details, section('Bindings from this exchange', bindings));
  const refresh = async () => {
    const x = await api('GET', base);
    fill(details, facts([
      ['Type', x.type], ['Durable', String(x.durable)], ['Auto delete', String(x.auto_delete)],
      ['Internal', String(x.internal)], ['Arguments', json(x.arguments)], x.policy ? ['Policy', x.policy] : null,
      ['Message rate in', rate(x.message_stats && x.message_stats.publish_in_details)],
      ['Message rate out', rate(x.message_stats && x.message_stats.publish_out_details)],
    ]));
    const bs = isDefault ? [] : await api('GET', `${base}/bindings/source`);
    fill(bindings, table([
      ['To', b => b.destination_type === 'queue' ? link(['queues', vhost, b.destination], b.destination) : link(['exchanges', vhost, b.destination], b.destination)],
      ['Type', b => b.destination_type],
      ['Routing key', b => b.routing_key],
      ['Arguments', b => json(b.arguments)],
      ['', b => me.act ? h('button', {type: 'button', class: 'link unbind', onclick: () => attempt(async () => {
        const kind = b.destination_type === 'queue' ? 'q' : 'e';
        await api('DELETE', `/bindings/${seg(vhost)}/e/${seg(name)}/${kind}/${seg(b.destination)}/${seg(b.properties_key)}`);
        await refresh();
      })}, 'Unbind') : ''],
    ], bs, {empty: isDefault ? 'The default exchange is bound to every queue by its name.' : 'No bindings.'}));
  };
  if (me.act) {
    if (!isDefault) main.appendChild(section('Add binding from this exchange', bindForm(vhost, name, refresh)));
    main.appendChild(section('Publish message', publishForm(vhost, name)));
    if (!isDefault && !name.startsWith('amq.')) {
      main.appendChild(section('Delete', h('button', {type: 'button', id: 'delete', class: 'danger', onclick: () => {
        if (!confirm(`Delete exchange ${name}?`)) return;
        attempt(async () => { await api('DELETE', base); window.location.hash = '#/exchanges'; });
      }}, 'Delete exchange')));
    }
  }
  await refresh();
  return refresh;
}

function bindForm(vhost, name, refresh) {
  const kind = h('select', {id: 'bind-kind'}, h('option', {value: 'q'}, 'To queue'), h('option', {value: 'e'}, 'To exchange'));
  const dest = h('input', {id: 'bind-destination', required: true});
  const key = h('input', {id: 'bind-key'});
  const args = argumentsEditor();
  return h('form', {id: 'bind', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      await api('POST', `/bindings/${seg(vhost)}/e/${seg(name)}/${kind.value}/${seg(dest.value)}`, {routing_key: key.value, arguments: args.value()});
      await refresh();
    });
  }}, field('Destination', h('span', {class: 'inline'}, kind, dest)), field('Routing key', key), args,
  h('button', {type: 'submit', id: 'bind-submit'}, 'Bind'));
}
