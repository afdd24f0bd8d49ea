// A server-side paged, sorted and filtered list (the API's page, page_size, sort,
// sort_reverse, name and use_regex), with its state in the URL so it can be bookmarked.

import {h, fill, table, route} from './dom.js';
import {api} from './api.js';

/** Renders the list of `path` into `into`; `columns` as for table(). Returns refresh(). */
export function pagedList(into, {path, routeParts, params, columns, defaultSort = 'name', extra = {}, what}) {
  const state = {
    page: Number(params.page) || 1,
    size: Number(params.size) || 100,
    name: params.name || '',
    regex: params.regex === '1',
    sort: params.sort || defaultSort,
    reverse: params.rev === '1',
  };
  const go = changes => {
    const next = {...state, ...changes};
    window.location.hash = route(routeParts, {
      page: next.page > 1 ? next.page : '', size: next.size !== 100 ? next.size : '', name: next.name,
      regex: next.regex ? '1' : '', sort: next.sort !== defaultSort ? next.sort : '', rev: next.reverse ? '1' : '',
    });
  };
  const filter = h('input', {id: 'filter', type: 'search', placeholder: 'Filter by name', value: state.name, 'aria-label': 'Filter by name'});
  const regex = h('input', {id: 'filter-regex', type: 'checkbox', checked: state.regex});
  const form = h('form', {class: 'filter', role: 'search', onsubmit: e => {
    e.preventDefault();
    go({name: filter.value, regex: regex.checked, page: 1});
  }}, filter, h('label', {}, regex, ' Regex'), h('button', {type: 'submit'}, 'Filter'));
  const summary = h('p', {class: 'summary', id: 'list-summary'});
  const body = h('div', {class: 'list-body'});
  const pager = h('nav', {class: 'pager', 'aria-label': 'Pages'});
  fill(into, form, summary, body, pager);
  const refresh = async () => {
    const q = new URLSearchParams({
      page: state.page, page_size: state.size, name: state.name, use_regex: state.regex,
      sort: state.sort, sort_reverse: state.reverse, pagination: true, ...extra,
    });
    const data = await api('GET', `${path}?${q}`);
    const onSort = field => go({sort: field, reverse: field === state.sort ? !state.reverse : false, page: 1});
    fill(body, table(columns, data.items, {sort: state.sort, reverse: state.reverse, onSort, empty: `No ${what}.`}));
    fill(summary, `${data.filtered_count} of ${data.total_count} ${what}` + (data.page_count > 1 ? `, page ${data.page} of ${data.page_count}` : ''));
    fill(pager,
      data.page > 1 ? h('button', {type: 'button', onclick: () => go({page: data.page - 1})}, '‹ Previous') : null,
      data.page < data.page_count ? h('button', {type: 'button', id: 'next-page', onclick: () => go({page: data.page + 1})}, 'Next ›') : null,
      h('select', {'aria-label': 'Page size', onchange: e => go({size: Number(e.target.value), page: 1})},
        [20, 50, 100, 500].map(n => h('option', {value: n, selected: n === state.size}, `${n} per page`))));
  };
  return refresh;
}
