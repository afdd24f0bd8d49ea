// Admin: users (add, tags, password, permissions, topic permissions, delete), virtual hosts
// (add, delete), policies and, for administrators, operator policies (add, delete). The API
// decides who may: the UI shows these pages by tag.

import {h, fill, section, field, table, link, num, json} from './dom.js';
import {api, seg} from './api.js';
import {me, attempt, notice} from './state.js';
import {vhostSelect, argumentsEditor} from './forms.js';

export async function renderUsers(main) {
  const list = h('div', {id: 'users'});
  const name = h('input', {id: 'user-name', required: true, autocomplete: 'off'});
  const pass = h('input', {id: 'user-password', type: 'password', autocomplete: 'new-password'});
  const tags = h('input', {id: 'user-tags', placeholder: 'administrator, monitoring, policymaker, management'});
  fill(main, h('h1', {}, 'Users'), list, section('Add a user', h('form', {id: 'add-user', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      await api('PUT', `/users/${seg(name.value)}`, {password: pass.value, tags: tags.value});
      notice(`User ${name.value} added.`);
      e.target.reset();
      await refresh();
    });
  }}, field('Username', name), field('Password', pass), field('Tags', tags),
  h('button', {type: 'submit', id: 'add-user-submit'}, 'Add user'))));
  const refresh = async () => {
    const users = await api('GET', '/users');
    const perms = await api('GET', '/permissions');
    const access = u => perms.filter(p => p.user === u).map(p => p.vhost).join(', ');
    fill(list, table([
      ['Name', u => link(['users', u.name], u.name)],
      ['Tags', u => Array.isArray(u.tags) ? u.tags.join(', ') : u.tags],
      ['Can access virtual hosts', u => access(u.name) || 'No access'],
      ['Has password', u => u.password_hash ? 'yes' : 'no'],
    ], users));
  };
  await refresh();
  return refresh;
}

export async function renderUser(main, [name]) {
  const perms = h('div', {id: 'user-permissions'});
  const vhost = await vhostSelect('permission-vhost');
  const [configure, write, read] = ['configure', 'write', 'read'].map(k => h('input', {id: `permission-${k}`, value: '.*'}));
  const tags = h('input', {id: 'user-tags'});
  const pass = h('input', {id: 'user-password', type: 'password', autocomplete: 'new-password'});
  const topics = h('div', {id: 'user-topic-permissions'});
  const topicVhost = await vhostSelect('topic-permission-vhost');
  const topicExchange = h('input', {id: 'topic-permission-exchange', value: 'amq.topic', required: true});
  const [topicWrite, topicRead] = ['write', 'read'].map(k => h('input', {id: `topic-permission-${k}`, value: '.*'}));
  fill(main, h('h1', {}, 'User ', h('span', {class: 'name'}, name)),
    section('Permissions', perms, h('form', {id: 'set-permission', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('PUT', `/permissions/${seg(vhost.value)}/${seg(name)}`, {configure: configure.value, write: write.value, read: read.value});
        await refresh();
      });
    }}, field('Virtual host', vhost), field('Configure regexp', configure), field('Write regexp', write), field('Read regexp', read),
    h('button', {type: 'submit', id: 'set-permission-submit'}, 'Set permission'))),
    section('Topic permissions', topics, h('form', {id: 'set-topic-permission', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('PUT', `/topic-permissions/${seg(topicVhost.value)}/${seg(name)}`,
          {exchange: topicExchange.value, write: topicWrite.value, read: topicRead.value});
        await refresh();
      });
    }}, field('Virtual host', topicVhost), field('Exchange', topicExchange), field('Write regexp', topicWrite),
    field('Read regexp', topicRead), h('button', {type: 'submit', id: 'set-topic-permission-submit'}, 'Set topic permission'))),
    section('Update this user', h('form', {id: 'update-user', onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        const body = {tags: tags.value};
        if (pass.value) body.password = pass.value;
        await api('PUT', `/users/${seg(name)}`, body);
        notice('User updated.');
      });
    }}, field('Tags', tags), field('New password (empty: unchanged)', pass), h('button', {type: 'submit'}, 'Update user'))),
    section('Delete this user', h('button', {type: 'button', id: 'delete', class: 'danger', onclick: () => {
      if (!confirm(`Delete user ${name}?`)) return;
      attempt(async () => { await api('DELETE', `/users/${seg(name)}`); window.location.hash = '#/users'; });
    }}, 'Delete user')));
  const refresh = async () => {
    const u = await api('GET', `/users/${seg(name)}`);
    if (document.activeElement !== tags) tags.value = Array.isArray(u.tags) ? u.tags.join(',') : u.tags;
    const ps = await api('GET', `/users/${seg(name)}/permissions`);
    fill(perms, table([
      ['Virtual host', p => p.vhost], ['Configure', p => p.configure], ['Write', p => p.write], ['Read', p => p.read],
      ['', p => h('button', {type: 'button', class: 'link', onclick: () => attempt(async () => {
        await api('DELETE', `/permissions/${seg(p.vhost)}/${seg(name)}`);
        await refresh();
      })}, 'Clear')],
    ], ps, {empty: 'No access to any virtual host.'}));
    const ts = (await api('GET', '/topic-permissions')).filter(t => t.user === name);
    fill(topics, table([
      ['Virtual host', t => t.vhost], ['Exchange', t => t.exchange], ['Write', t => t.write], ['Read', t => t.read],
      ['', t => h('button', {type: 'button', class: 'link', onclick: () => attempt(async () => {
        await api('DELETE', `/topic-permissions/${seg(t.vhost)}/${seg(name)}`);
        await refresh();
      })}, 'Clear')],
    ], ts, {empty: 'No topic permissions (every routing key allowed).'}));
  };
  await refresh();
  return refresh;
}

export async function renderVhosts(main) {
  const list = h('div', {id: 'vhosts'});
  const name = h('input', {id: 'vhost-name', required: true});
  const description = h('input', {id: 'vhost-description'});
  fill(main, h('h1', {}, 'Virtual hosts'), list, section('Add a new virtual host', h('form', {id: 'add-vhost', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      await api('PUT', `/vhosts/${seg(name.value)}`, {description: description.value});
      notice(`Virtual host ${name.value} added.`);
      e.target.reset();
      await refresh();
    });
  }}, field('Name', name), field('Description', description), h('button', {type: 'submit', id: 'add-vhost-submit'}, 'Add virtual host'))));
  const refresh = async () => {
    fill(list, table([
      ['Name', v => v.name], ['Description', v => v.description || ''],
      ['Ready', v => num(v.messages_ready), {num: true}], ['Unacked', v => num(v.messages_unacknowledged), {num: true}],
      ['', v => h('button', {type: 'button', class: 'link danger', onclick: () => {
        if (!confirm(`Delete virtual host ${v.name} and everything in it?`)) return;
        attempt(async () => { await api('DELETE', `/vhosts/${seg(v.name)}`); await refresh(); });
      }}, 'Delete')],
    ], await api('GET', '/vhosts')));
  };
  await refresh();
  return refresh;
}

export async function renderPolicies(main) {
  const parts = [await policyEditor('policies', 'Policies', '')];
  if (me.admin) parts.push(await policyEditor('operator-policies', 'Operator policies', 'operator-'));
  fill(main, h('h1', {}, 'Policies'), parts.map(p => p.el));
  const refresh = async () => { for (const p of parts) await p.refresh(); };
  await refresh();
  return refresh;
}

/** A list of `path`'s policies (user or operator) with the add form; ids start with `prefix`. */
async function policyEditor(path, title, prefix) {
  const list = h('div', {id: `${prefix}policies`});
  const vhost = await vhostSelect(`${prefix}policy-vhost`);
  const name = h('input', {id: `${prefix}policy-name`, required: true});
  const pattern = h('input', {id: `${prefix}policy-pattern`, required: true, value: '.*'});
  const applyTo = h('select', {id: `${prefix}policy-apply-to`}, ['all', 'queues', 'exchanges', 'classic_queues', 'quorum_queues', 'streams'].map(v => h('option', {value: v}, v)));
  const priority = h('input', {id: `${prefix}policy-priority`, type: 'number', value: 0});
  const definition = argumentsEditor([['max-length', 'number', 'Max length'], ['message-ttl', 'number', 'Message TTL (ms)'],
    ['dead-letter-exchange', 'string', 'Dead letter exchange'], ['expires', 'number', 'Auto expire (ms)'], ['max-age', 'string', 'Stream max age']]);
  definition.querySelector('legend').textContent = 'Definition';
  const refresh = async () => {
    fill(list, table([
      ['Virtual host', p => p.vhost], ['Name', p => p.name], ['Pattern', p => p.pattern], ['Apply to', p => p['apply-to']],
      ['Definition', p => json(p.definition)], ['Priority', p => p.priority, {num: true}],
      ['', p => h('button', {type: 'button', class: 'link danger', onclick: () => attempt(async () => {
        await api('DELETE', `/${path}/${seg(p.vhost)}/${seg(p.name)}`);
        await refresh();
      })}, 'Delete')],
    ], await api('GET', `/${path}`), {empty: `No ${title.toLowerCase()}.`}));
  };
  const el = h('div', {}, section(title, list), section(`Add or update ${title.toLowerCase().replace(/ies$/, 'y')}`,
    h('form', {id: `add-${prefix}policy`, onsubmit: e => {
      e.preventDefault();
      attempt(async () => {
        await api('PUT', `/${path}/${seg(vhost.value)}/${seg(name.value)}`,
          {pattern: pattern.value, 'apply-to': applyTo.value, priority: Number(priority.value), definition: definition.value()});
        await refresh();
      });
    }}, field('Virtual host', vhost), field('Name', name), field('Pattern', pattern), field('Apply to', applyTo),
    field('Priority', priority), definition, h('button', {type: 'submit', id: `add-${prefix}policy-submit`}, 'Add / update'))));
  return {el, refresh};
}
