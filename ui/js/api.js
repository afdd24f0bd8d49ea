// The management API as the UI calls it. Credentials live in this tab's sessionStorage and
// travel only in the Authorization header this code sets: no cookie authenticates anything,
// so another site cannot make the browser act as the user.

const KEY = 'warren.credentials';

/** An API refusal: its HTTP status and RabbitMQ's {error, reason}. */
export class ApiError extends Error {
  constructor(status, error, reason) {
    super(reason || error || ('HTTP ' + status));
    this.status = status;
    this.error = error;
    this.reason = reason;
  }
}

export function setCredentials(user, password) {
  sessionStorage.setItem(KEY, btoa(String.fromCharCode(...new TextEncoder().encode(user + ':' + password))));
}

export function clearCredentials() {
  sessionStorage.removeItem(KEY);
}

export function hasCredentials() {
  return sessionStorage.getItem(KEY) !== null;
}

/** Calls the API; resolves to the parsed JSON (null for an empty answer), rejects with ApiError. */
export async function api(method, path, body, headers = {}) {
  const init = {method, headers: {...headers}, credentials: 'omit', cache: 'no-store'};
  const auth = sessionStorage.getItem(KEY);
  if (auth) init.headers.Authorization = 'Basic ' + auth;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch('/api' + path, init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!resp.ok) {
    const reason = data && typeof data === 'object' ? (typeof data.reason === 'string' ? data.reason : JSON.stringify(data.reason)) : String(data || '');
    throw new ApiError(resp.status, data && data.error, reason);
  }
  return data;
}

/** A vhost or name as one URL path segment. */
export const seg = encodeURIComponent;
