// Admin: virtual host limits (max-connections, max-queues) and user limits
// (max-connections, max-channels), each listed with set and clear.

import {h, fill, section, field, table} from './dom.js';
import {api, seg} from './api.js';
import {attempt} from './state.js';
import {vhostSelect} from './forms.js';

/** Rows of one limit each from the API's [{vhost|user, value: {name: n}}]. */
function flatten(list, owner) {
  return list.flatMap(l => Object.entries(l.value || {}).map(([name, value]) => ({owner: l[owner], name, value})));
}

export async function renderLimits(main) {
  const vhostLimits = h('div', {id: 'vhost-limits'});
  const userLimits = h('div', {id: 'user-limits'});
  const vhost = await vhostSelect('vhost-limit-vhost');
  const vhostName = h('select', {id: 'vhost-limit-name'}, ['max-connections', 'max-queues'].map(n => h('option', {value: n}, n)));
  const vhostValue = h('input', {id: 'vhost-limit-value', type: 'number', required: true});
  const user = h('select', {id: 'user-limit-user'});
  const userName = h('select', {id: 'user-limit-name'}, ['max-connections', 'max-channels'].map(n => h('option', {value: n}, n)));
  const userValue = h('input', {id: 'user-limit-value', type: 'number', required: true});
  fill(user, (await api('GET', '/users')).map(u => h('option', {value: u.name}, u.name)));
  fill(main, h('h1', {}, 'Limits'),
    section('Virtual host limits', vhostLimits, h('form', {id: 'set-vhost-limit', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('PUT', `/vhost-limits/${seg(vhost.value)}/${seg(vhostName.value)}`, {value: Number(vhostValue.value)});
        await refresh();
      });
    }}, field('Virtual host', vhost), field('Limit', vhostName), field('Value (-1: no limit)', vhostValue),
    h('button', {type: 'submit', id: 'set-vhost-limit-submit'}, 'Set limit'))),
    section('User limits', userLimits, h('form', {id: 'set-user-limit', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('PUT', `/user-limits/${seg(user.value)}/${seg(userName.value)}`, {value: Number(userValue.value)});
        await refresh();
      });
    }}, field('User', user), field('Limit', userName), field('Value (-1: no limit)', userValue),
    h('button', {type: 'submit', id: 'set-user-limit-submit'}, 'Set limit'))));
  const clear = path => h('button', {type: 'button', class: 'link', onclick: () => attempt(async () => {
    await api('DELETE', path);
    await refresh();
  })}, 'Clear');
  const refresh = async () => {
    fill(vhostLimits, table([
      ['Virtual host', l => l.owner], ['Limit', l => l.name], ['Value', l => String(l.value), {num: true}],
      ['', l => clear(`/vhost-limits/${seg(l.owner)}/${seg(l.name)}`)],
    ], flatten(await api('GET', '/vhost-limits'), 'vhost'), {empty: 'No virtual host limits.'}));
    fill(userLimits, table([
      ['User', l => l.owner], ['Limit', l => l.name], ['Value', l => String(l.value), {num: true}],
      ['', l => clear(`/user-limits/${seg(l.owner)}/${seg(l.name)}`)],
    ], flatten(await api('GET', '/user-limits'), 'user'), {empty: 'No user limits.'}));
  };
  await refresh();
  return refresh;
}
