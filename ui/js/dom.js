// Building the page from data. Every value from the broker goes into the DOM as text
// (text nodes, textContent, attribute values), never as HTML: nothing here parses markup.

/** An element: h('a', {href: '#/', class: 'x', onclick: f}, 'text', child, [more]). */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A table: columns are [heading, row => cell content, {num: true, sort: 'field'}]. */
export function table(columns, rows, opts = {}) {
  const head = h('tr', {}, columns.map(([title, , o = {}]) => {
    if (!o.sort || !opts.onSort) return h('th', {class: o.num ? 'num' : ''}, title);
    const active = opts.sort === o.sort;
    const label = title + (active ? (opts.reverse ? ' ▼' : ' ▲') : '');
    return h('th', {class: o.num ? 'num' : '', 'aria-sort': active ? (opts.reverse ? 'descending' : 'ascending') : 'none'},
      h('button', {type: 'button', class: 'link', onclick: () => opts.onSort(o.sort)}, label));
  }));
  const body = rows.length
    ? rows.map(r => h('tr', {}, columns.map(([, cell, o = {}]) => h('td', {class: o.num ? 'num' : ''}, cell(r)))))
    : [h('tr', {}, h('td', {colspan: columns.length, class: 'empty'}, opts.empty || 'Nothing to show.'))];
  return h('div', {class: 'table-wrap'}, h('table', {}, h('thead', {}, head), h('tbody', {}, body)));
}

/** A definition list of [label, value] pairs. */
export function facts(pairs) {
  return h('dl', {class: 'facts'}, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

/** A section with a heading. */
export function section(title, ...children) {
  return h('section', {}, h('h2', {}, title), children);
}

/** A labelled form field. */
export function field(label, input) {
  return h('label', {class: 'field'}, h('span', {}, label), input);
}

/** A number as RabbitMQ's UI shows it. */
export function num(n) {
  if (n === undefined || n === null || n === '') return '';
  return typeof n === 'number' ? n.toLocaleString('en-US') : String(n);
}

/** A rate per second. */
export function rate(details) {
  const r = details && typeof details.rate === 'number' ? details.rate : 0;
  return (Math.round(r * 10) / 10).toLocaleString('en-US') + '/s';
}

/** Bytes in binary units. */
export function bytes(n) {
  if (typeof n !== 'number') return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

/** A hash-route link: link(['queues', vhost, name], text). Path parts are URL-encoded. */
export function link(parts, text) {
  return h('a', {href: route(parts)}, text);
}

/** The hash URL of a route. */
export function route(parts, query) {
  const path = '#/' + parts.map(encodeURIComponent).join('/');
  const q = query ? new URLSearchParams(Object.entries(query).filter(([, v]) => v !== '' && v !== undefined && v !== null)).toString() : '';
  return q ? path + '?' + q : path;
}

/** A value shown as JSON text (arguments, headers). */
export function json(v) {
  if (v === undefined || v === null) return '';
  if (typeof v === 'object' && Object.keys(v).length === 0) return '';
  return h('code', {}, JSON.stringify(v));
}
