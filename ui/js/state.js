// What every page shares: the logged-in user's rights and the error banner.

import {h, fill} from './dom.js';
import {ApiError} from './api.js';

/** What the logged-in user's tags allow, from /api/whoami: `act` shows the forms that change
 * things in the user's vhosts (management, policymaker, administrator; not monitoring alone),
 * `admin` users and vhosts, `policies` policies. */
export const me = {name: '', tags: [], act: false, admin: false, policies: false};

const banner = () => document.getElementById('error');

/** Shows an error (an ApiError's reason, or any message) until dismissed or the next page. */
export function showError(e) {
  const text = e instanceof ApiError ? `${e.status} ${e.error || ''}: ${e.reason}` : String(e && e.message || e);
  const el = banner();
  fill(el, h('span', {id: 'error-text'}, text), h('button', {type: 'button', class: 'link', onclick: clearError}, 'Dismiss'));
  el.hidden = false;
}

export function clearError() {
  const el = banner();
  el.hidden = true;
  el.replaceChildren();
}

/** Shows a short confirmation of something done. */
export function notice(text) {
  const el = banner();
  fill(el, h('span', {id: 'notice-text', class: 'ok'}, text), h('button', {type: 'button', class: 'link', onclick: clearError}, 'Dismiss'));
  el.hidden = false;
}

/** Runs an action; reports its failure in the banner. Resolves to whether it succeeded. */
export async function attempt(action) {
  try {
    await action();
    return true;
  } catch (e) {
    showError(e);
    return false;
  }
}
