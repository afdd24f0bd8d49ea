// The UI's shell: log-in, navigation, hash routes (real, bookmarkable URLs: #/queues/%2F/q),
// the refresh timer and the error banner. Pages render into <main> and return a refresh
// function that updates their data in place, so forms keep what the user typed.

import {h, fill} from './dom.js';
import {api, ApiError, setCredentials, clearCredentials, hasCredentials} from './api.js';
import {me, showError, clearError} from './state.js';
import * as overview from './overview.js';
import * as queues from './queues.js';
import * as exchanges from './exchanges.js';
import * as connections from './connections.js';
import * as admin from './admin.js';
import * as limits from './limits.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const session = document.getElementById('session');
const routes = [
  [/^$/, overview.render],
  [/^connections$/, connections.renderList],
  [/^connections\/([^/]+)$/, connections.renderOne],
  [/^channels$/, connections.renderChannels],
  [/^channels\/([^/]+)$/, connections.renderChannel],
  [/^exchanges$/, exchanges.renderList],
  [/^exchanges\/([^/]+)\/([^/]*)$/, exchanges.renderOne],
  [/^queues$/, queues.renderList],
  [/^queues\/([^/]+)\/([^/]+)$/, queues.renderOne],
  [/^users$/, admin.renderUsers],
  [/^users\/([^/]+)$/, admin.renderUser],
  [/^vhosts$/, admin.renderVhosts],
  [/^policies$/, admin.renderPolicies],
  [/^limits$/, limits.renderLimits],
];

let current = null;
let timer = null;

/** The current route's path and query (#/queues?page=2). */
function location() {
  const hash = window.location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = hash.split('?');
  return {path, params: Object.fromEntries(new URLSearchParams(query))};
}

async function navigate() {
  clearError();
  if (!hasCredentials()) return renderLogin();
  if (!me.name && !(await loadMe())) return;
  const {path, params} = location();
  const match = routes.map(([re, page]) => [path.match(re), page]).find(([m]) => m);
  highlight(path);
  if (!match) {
    fill(main, h('h1', {}, 'Not found'), h('p', {}, 'No page at this address.'));
    current = null;
    return;
  }
  const [m, page] = match;
  fill(main);
  const args = m.slice(1).map(decodeURIComponent);
  try {
    current = await page(main, args, params);
  } catch (e) {
    current = null;
    showError(e);
  }
  main.focus({preventScroll: true});
}

async function refresh() {
  if (!current || document.hidden) return;
  try {
    await current();
  } catch (e) {
    showError(e);
  }
}

async function loadMe() {
  try {
    const who = await api('GET', '/whoami');
    me.name = who.name;
    me.tags = Array.isArray(who.tags) ? who.tags : String(who.tags || '').split(',').filter(Boolean);
    me.admin = me.tags.includes('administrator');
    me.policies = me.admin || me.tags.includes('policymaker');
    me.act = me.policies || me.tags.includes('management');
    let interval = 5;
    try {
      const o = await api('GET', '/overview');
      interval = Math.max(1, Math.round((o.collect_statistics_interval || 5000) / 1000));
    } catch { /* the default */ }
    renderChrome(interval);
    return true;
  } catch (e) {
    clearCredentials();
    renderLogin(e instanceof ApiError && e.status === 401 ? 'Login failed: wrong user name or password, or not a management user.' : String(e.message || e));
    return false;
  }
}

/** The navigation and session controls; pages refresh every `interval` seconds (the broker's
 * collect_statistics_interval) unless the user chose otherwise. */
function renderChrome(interval) {
  const items = [['#/', 'Overview'], ['#/connections', 'Connections'], ['#/channels', 'Channels'],
    ['#/exchanges', 'Exchanges'], ['#/queues', 'Queues']];
  if (me.admin) items.push(['#/users', 'Users'], ['#/vhosts', 'Virtual hosts'], ['#/limits', 'Limits']);
  if (me.policies) items.push(['#/policies', 'Policies']);
  fill(nav, items.map(([href, text]) => h('a', {href, 'data-path': href.slice(2)}, text)));
  const every = h('select', {id: 'refresh', 'aria-label': 'Refresh every', onchange: e => { localStorage.setItem('warren.refresh', e.target.value); setRefresh(e.target.value); }},
    [...new Set([String(interval), '5', '10', '30', '60'])].map(v => [v, `Every ${v} s`]).concat([['0', 'Paused']])
      .map(([v, t]) => h('option', {value: v}, t)));
  every.value = localStorage.getItem('warren.refresh') || String(interval);
  setRefresh(every.value);
  fill(session,
    every,
    h('button', {type: 'button', class: 'link', id: 'theme', onclick: toggleTheme}, 'Theme'),
    h('span', {class: 'who'}, me.name, h('small', {}, ' (' + me.tags.join(', ') + ')')),
    h('button', {type: 'button', id: 'logout', onclick: logout}, 'Log out'));
}

function highlight(path) {
  const top = path.split('/')[0];
  for (const a of nav.querySelectorAll('a')) {
    a.classList.toggle('active', a.dataset.path === top);
    if (a.dataset.path === top) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

function setRefresh(seconds) {
  clearInterval(timer);
  timer = Number(seconds) > 0 ? setInterval(refresh, Number(seconds) * 1000) : null;
}

function toggleTheme() {
  const root = document.documentElement;
  const dark = root.dataset.theme ? root.dataset.theme === 'dark' : matchMedia('(prefers-color-scheme: dark)').matches;
  root.dataset.theme = dark ? 'light' : 'dark';
  localStorage.setItem('warren.theme', root.dataset.theme);
}

function logout() {
  clearCredentials();
  Object.assign(me, {name: '', tags: [], act: false, admin: false, policies: false});
  clearInterval(timer);
  nav.replaceChildren();
  session.replaceChildren();
  window.location.hash = '#/';
  renderLogin();
}

function renderLogin(message) {
  current = null;
  nav.replaceChildren();
  session.replaceChildren();
  const user = h('input', {id: 'login-user', name: 'username', autocomplete: 'username', required: true});
  const pass = h('input', {id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password'});
  const form = h('form', {id: 'login', class: 'login', onsubmit: async e => {
    e.preventDefault();
    setCredentials(user.value, pass.value);
    if (await loadMe()) navigate();
  }},
  h('h1', {}, 'Log in'),
  message ? h('p', {class: 'login-error', role: 'alert'}, message) : null,
  h('label', {class: 'field'}, h('span', {}, 'Username'), user),
  h('label', {class: 'field'}, h('span', {}, 'Password'), pass),
  h('button', {type: 'submit', id: 'login-submit'}, 'Log in'));
  fill(main, form);
  user.focus();
}

const theme = localStorage.getItem('warren.theme');
if (theme) document.documentElement.dataset.theme = theme;
window.addEventListener('hashchange', navigate);
navigate();
