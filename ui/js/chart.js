// Live line charts (uPlot, vendored): each refresh appends a sample, and a chart keeps the
// last MAX samples, so a tab left open holds a bounded amount of memory.

import {h} from './dom.js';

const MAX = 120;

/** A chart of `series` ([label, value-of-sample]); `.push(sample)` adds a point. */
export function liveChart(id, title, series) {
  const el = h('figure', {class: 'chart', id}, h('figcaption', {}, title));
  const data = [[], ...series.map(() => [])];
  let plot = null;
  // The figure's width, which the stylesheet's grid sets (two side by side where there is room).
  const width = () => Math.max(240, el.clientWidth - 20);
  el.push = sample => {
    data[0].push(Date.now() / 1000);
    series.forEach(([, of], i) => data[i + 1].push(Number(of(sample)) || 0));
    if (data[0].length > MAX) data.forEach(d => d.shift());
    if (typeof window.uPlot !== 'function') return;
    if (!plot) {
      const colors = ['#e8590c', '#1c7ed6', '#2f9e44', '#ae3ec9', '#f59f00', '#868e96'];
      plot = new window.uPlot({
        width: width(), height: 180,
        // At least the last minute, so that the first samples do not stretch the axis.
        scales: {x: {time: true, auto: false, range: () => {
          const xs = data[0];
          const hi = xs[xs.length - 1];
          return [Math.min(xs[0], hi - 60), hi];
        }}},
        series: [{}, ...series.map(([label], i) => ({label, stroke: colors[i % colors.length], width: 2}))],
        axes: [{stroke: 'currentColor', grid: {stroke: 'rgba(128,128,128,0.2)'}}, {stroke: 'currentColor', grid: {stroke: 'rgba(128,128,128,0.2)'}}],
      }, data, el);
    } else {
      plot.setData(data);
    }
  };
  return el;
}
