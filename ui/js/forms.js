// Form pieces several pages share: the arguments editor with RabbitMQ's helpers, the
// publish form, and the vhost picker.

import {h, fill, field} from './dom.js';
import {api, seg} from './api.js';
import {attempt, notice} from './state.js';

/** Typed key/value rows; `.value()` gives the arguments object ({} when empty). */
export function argumentsEditor(helpers = []) {
  const rows = h('div', {class: 'args'});
  const add = (key = '', value = '', type = 'string') => {
    const k = h('input', {class: 'arg-key', 'aria-label': 'Argument name', value: key});
    const v = h('input', {class: 'arg-value', 'aria-label': 'Argument value', value});
    const t = h('select', {class: 'arg-type', 'aria-label': 'Argument type'},
      ['string', 'number', 'boolean', 'list'].map(x => h('option', {value: x}, x)));
    t.value = type;
    const row = h('div', {class: 'arg-row'}, k, v, t,
      h('button', {type: 'button', class: 'link', 'aria-label': 'Remove argument', onclick: () => row.remove()}, '×'));
    rows.appendChild(row);
  };
  const el = h('fieldset', {class: 'arguments'}, h('legend', {}, 'Arguments'), rows,
    h('div', {class: 'helpers'},
      h('button', {type: 'button', class: 'link', onclick: () => add()}, '+ argument'),
      helpers.map(([key, type, hint]) => h('button', {type: 'button', class: 'link helper', title: hint, onclick: () => add(key, '', type)}, key))));
  el.value = () => {
    const out = {};
    for (const row of rows.querySelectorAll('.arg-row')) {
      const key = row.querySelector('.arg-key').value.trim();
      if (!key) continue;
      const raw = row.querySelector('.arg-value').value;
      const type = row.querySelector('.arg-type').value;
      out[key] = type === 'number' ? Number(raw)
        : type === 'boolean' ? raw === 'true'
          : type === 'list' ? raw.split(',').map(s => s.trim()).filter(Boolean)
            : raw;
    }
    return out;
  };
  el.reset = () => rows.replaceChildren();
  return el;
}

/** RabbitMQ's queue argument helpers: [key, type, description]. */
export const QUEUE_HELPERS = [
  ['x-message-ttl', 'number', 'Message TTL (ms)'],
  ['x-expires', 'number', 'Auto expire (ms)'],
  ['x-max-length', 'number', 'Max length'],
  ['x-max-length-bytes', 'number', 'Max length bytes'],
  ['x-overflow', 'string', 'drop-head, reject-publish or reject-publish-dlx'],
  ['x-dead-letter-exchange', 'string', 'Dead letter exchange'],
  ['x-dead-letter-routing-key', 'string', 'Dead letter routing key'],
  ['x-single-active-consumer', 'boolean', 'Single active consumer'],
  ['x-max-priority', 'number', 'Maximum priority'],
  ['x-delivery-limit', 'number', 'Delivery limit (quorum)'],
  ['x-queue-leader-locator', 'string', 'client-local or balanced'],
  ['x-max-age', 'string', 'Max age of a stream (7D, 12h)'],
];

/** RabbitMQ's exchange argument helpers. */
export const EXCHANGE_HELPERS = [
  ['alternate-exchange', 'string', 'Alternate exchange'],
];

/** A select of the vhosts the user sees. */
export async function vhostSelect(id) {
  const sel = h('select', {id, name: 'vhost'});
  const vhosts = await api('GET', '/vhosts');
  fill(sel, vhosts.map(v => h('option', {value: v.name}, v.name)));
  return sel;
}

/** The publish form of an exchange (a queue publishes through the default exchange with its
 * own name as the routing key). */
export function publishForm(vhost, exchange, fixedKey) {
  const key = h('input', {id: 'publish-key', value: fixedKey || ''});
  const mode = h('select', {id: 'publish-mode'}, h('option', {value: '1'}, '1 - Non-persistent'), h('option', {value: '2'}, '2 - Persistent'));
  const headers = argumentsEditor();
  headers.querySelector('legend').textContent = 'Headers';
  const props = h('input', {id: 'publish-properties', placeholder: 'content_type=text/plain, priority=1'});
  const payload = h('textarea', {id: 'publish-payload', rows: 4});
  const encoding = h('select', {id: 'publish-encoding'}, h('option', {value: 'string'}, 'String'), h('option', {value: 'base64'}, 'Base64'));
  return h('form', {id: 'publish', onsubmit: e => {
    e.preventDefault();
    attempt(async () => {
      const properties = {delivery_mode: Number(mode.value), headers: headers.value()};
      for (const pair of props.value.split(',')) {
        const [k, ...rest] = pair.split('=');
        if (k.trim()) properties[k.trim()] = rest.join('=').trim();
      }
      if (properties.priority !== undefined) properties.priority = Number(properties.priority);
      const r = await api('POST', `/exchanges/${seg(vhost)}/${seg(exchange || 'amq.default')}/publish`,
        {routing_key: key.value, payload: payload.value, payload_encoding: encoding.value, properties});
      notice(r && r.routed ? 'Message published.' : 'Message published, but not routed.');
    });
  }},
  fixedKey === undefined ? field('Routing key', key) : null,
  field('Delivery mode', mode), headers, field('Properties', props), field('Payload', payload),
  field('Payload encoding', encoding), h('button', {type: 'submit', id: 'publish-submit'}, 'Publish message'));
}

/** Messages as `get` and `peek` return them, rendered as text. */
export function messagesView(messages) {
  if (!messages.length) return h('p', {class: 'empty', id: 'messages-empty'}, 'Queue is empty.');
  return h('ol', {class: 'messages'}, messages.map((m, i) => h('li', {class: 'message'},
    h('h3', {}, `Message ${i + 1}`),
    h('dl', {class: 'facts'},
      h('dt', {}, 'Exchange'), h('dd', {}, m.exchange || '(AMQP default)'),
      h('dt', {}, 'Routing key'), h('dd', {}, m.routing_key),
      h('dt', {}, 'Redelivered'), h('dd', {}, String(m.redelivered)),
      m.message_count !== undefined ? [h('dt', {}, 'Left in queue'), h('dd', {}, String(m.message_count))] : null,
      h('dt', {}, 'Properties'), h('dd', {}, h('code', {}, JSON.stringify(m.properties))),
      h('dt', {}, 'Payload'), h('dd', {}, `${m.payload_bytes} bytes, ${m.payload_encoding}`)),
    h('pre', {class: 'payload'}, m.payload))));
}
