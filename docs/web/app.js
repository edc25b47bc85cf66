// vramfit's page: runs the command-line tool compiled to WebAssembly (vramfit.js, built by em++
// from examples/web/api.cpp) with `train -f json` and the knobs' options, and shows its JSON; a
// second run with `--timeline` gives the step's events, drawn as an SVG step line.
// The knobs live in the address's hash (#model=llama-3-8b&dp=8), so a result can be shared.
'use strict';

// Each knob: the tool's option (the form field's id), and for a list its choices ('' = the
// tool's default, which the first entry names).
const choices = {
  precision: ['', 'fp32', 'bf16', 'fp16', 'amp-bf16', 'amp-fp16', 'bf16-fp32-master',
              'bf16-fp32-master-16bit-grads', 'fp16-fp32-master', 'fp8'],
  optimizer: ['', 'sgd', 'sgd-momentum', 'adam', 'adamw', 'adamw-amsgrad', 'adamw-fused',
              'adagrad', 'rmsprop', 'adadelta', 'adamax', 'nadam', 'radam', 'rprop', 'lion',
              'adafactor', 'adamw-8bit', 'paged-adamw-8bit', 'muon'],
  recompute: ['', 'none', 'selective', 'full', 'op-sac'],
  zero: ['', '0', '1', '2', '3'],
  fsdp: ['', 'full', 'grad-op', 'hybrid', 'none'],
};
const defaults = {precision: 'bf16-fp32-master', optimizer: 'adamw', recompute: 'none',
                  zero: 'none', fsdp: 'none'};
// In the order of the tool's options; `config` (pasted config.json text) goes to --model.
const knobs = ['model', 'config', 'precision', 'optimizer', 'micro-batch', 'seq-len', 'recompute',
               'lora-rank', 'qlora', 'dp', 'zero', 'fsdp', 'tp', 'pp', 'gpu'];
const components = ['weights', 'gradients', 'master_weights', 'optimizer_states', 'activations',
                    'kv_cache', 'buffers', 'overhead'];
const colours = ['#3b6fd4', '#e0892b', '#7a4fc2', '#d14a61', '#2f9e6e', '#8c6d3f', '#5fa8c9',
                 '#9aa3b5'];

const $ = (id) => document.getElementById(id);
let run = null;  // the tool: words -> {status, stdout, stderr}

function tool(args) {
  return JSON.parse(run(JSON.stringify(args)));
}

function gib(bytes) {
  return (bytes / 2 ** 30).toFixed(2) + ' GiB';
}

function option(select, value, text) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  select.appendChild(o);
}

function fillChoices() {
  for (const [id, list] of Object.entries(choices))
    for (const value of list)
      option($(id), value, value === '' ? `(default: ${defaults[id]})` : value);
  for (const m of JSON.parse(tool(['models', '-f', 'json']).stdout))
    option($('model'), m.key, `${m.name} (${m.key})`);
  for (const g of JSON.parse(tool(['gpus', '-f', 'json']).stdout))
    option($('gpu'), g.key, `${g.name} (${gib(g.capacity)})`);
  $('model').value = 'llama-3-8b';
  $('gpu').value = 'h100';
}

// The knobs as the hash holds them: only those set, the preset and the GPU always.
function readForm() {
  const state = new URLSearchParams();
  for (const id of knobs) {
    const field = $(id);
    const value = field.type === 'checkbox' ? (field.checked ? '1' : '') : field.value.trim();
    if (value !== '') state.set(id, value);
  }
  return state;
}

function writeForm(state) {
  for (const id of knobs) {
    const field = $(id);
    const value = state.get(id);
    if (field.type === 'checkbox') field.checked = value === '1';
    else if (value !== null) field.value = value;
    else if (id === 'model') field.value = 'llama-3-8b';
    else if (id === 'gpu') field.value = 'h100';
    else field.value = '';
  }
}

// The tool's words for the knobs.
function words(state) {
  const args = ['train', '-f', 'json'];
  for (const [id, value] of state) {
    if (id === 'model' && state.has('config')) continue;
    if (id === 'config') args.push('--model', value);
    else if (id === 'qlora') args.push('--qlora');
    else args.push('--' + id, value);
  }
  return args;
}

function quote(word) {
  return /^[\w.,:=+-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

function show(state) {
  const args = words(state);
  $('command').textContent = 'vramfit ' +
      args.map((w, i) => (state.has('config') && args[i - 1] === '--model' ? 'config.json' : quote(w)))
          .join(' ');
  const answer = tool(args);
  const error = $('error');
  const result = $('result');
  if (answer.status !== 0) {
    error.hidden = false;
    error.textContent = answer.stderr;
    result.dataset.valid = 'false';
    return;
  }
  error.hidden = true;
  result.dataset.valid = 'true';
  const r = JSON.parse(answer.stdout);
  const peak = r.memory.total;
  const capacity = r.device.capacity;
  $('configuration').textContent = r.configuration;
  const verdict = $('verdict');
  verdict.dataset.fits = String(r.fits);
  verdict.className = r.fits ? 'fits' : 'over';
  verdict.textContent = r.fits
      ? `Fits on ${r.device.name}: ${gib(peak)} of ${gib(capacity)}, ${gib(capacity - peak)} free`
      : `Does not fit on ${r.device.name}: ${gib(peak)} of ${gib(capacity)}, ` +
        `${gib(peak - capacity)} over`;
  $('peak-text').textContent = gib(peak);
  $('peak').textContent = String(peak);
  $('capacity-text').textContent = gib(capacity);
  $('capacity').textContent = String(capacity);
  $('max-micro-batch').textContent = String(r.max_micro_batch);
  $('max-sequence').textContent = String(r.max_sequence);

  // The stacked bar: the components at the peak, against the larger of the peak and the GPU.
  const scale = Math.max(peak, capacity);
  const bar = $('bar');
  const legend = $('legend');
  const rows = $('breakdown').tBodies[0];
  bar.replaceChildren();
  legend.replaceChildren();
  rows.replaceChildren();
  components.forEach((name, i) => {
    const bytes = r.at_peak[name] ?? 0;
    const row = rows.insertRow();
    row.dataset.component = name;
    row.insertCell().textContent = name.replace('_', ' ');
    row.insertCell().textContent = gib(bytes);
    row.insertCell().textContent = String(bytes);
    if (bytes === 0) return;
    const segment = document.createElement('div');
    segment.className = 'segment';
    segment.dataset.component = name;
    segment.style.width = `${(100 * bytes) / scale}%`;
    segment.style.background = colours[i];
    segment.title = `${name.replace('_', ' ')}: ${gib(bytes)}`;
    bar.appendChild(segment);
    const key = document.createElement('span');
    key.innerHTML = `<i style="background:${colours[i]}"></i>`;
    key.append(`${name.replace('_', ' ')} ${gib(bytes)}`);
    legend.appendChild(key);
  });
  const line = document.createElement('div');
  line.className = 'capacity';
  line.style.left = `calc(${(100 * capacity) / scale}% - 1px)`;
  line.title = `${r.device.name}: ${gib(capacity)}`;
  bar.appendChild(line);

  // The step's timeline: a second run, as `--timeline` leaves out the largest batch and sequence.
  const timeline = tool([...args, '--timeline']);
  if (timeline.status === 0) plot(JSON.parse(timeline.stdout), capacity);
  else $('timeline').replaceChildren();
}

function svg(name, attributes, text) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', name);
  for (const [key, value] of Object.entries(attributes)) e.setAttribute(key, value);
  if (text !== undefined) e.textContent = text;
  return e;
}

// The allocated bytes after each event of the step (x: the event's index, y: `alive`), the
// phases shaded, the GPU's capacity as a line and the peak marked. A run of identical layers is
// one event whose bar rises to its last layer's total (`alive_last_layer`).
function plot(t, capacity) {
  const events = t.timeline;
  const peak = t.timeline_peak;
  const [width, height, left, right, top, bottom] = [640, 190, 64, 8, 22, 18];
  const plotWidth = width - left - right;
  const dx = plotWidth / events.length;
  const x = (i) => left + i * dx;
  const highest =
      Math.max(capacity, ...events.map((e) => Math.max(e.alive, e.alive_last_layer ?? 0)));
  const y = (bytes) => top + (height - top - bottom) * (1 - bytes / (highest * 1.05));
  const chart = svg('svg', {viewBox: `0 0 ${width} ${height}`, role: 'img',
                            'aria-label': 'allocated bytes over the training step'});
  // The phases, as contiguous bands of events.
  let first = 0;
  events.forEach((e, i) => {
    if (i + 1 < events.length && events[i + 1].phase === e.phase) return;
    const band = svg('rect', {class: 'phase', x: x(first), y: top, width: x(i + 1) - x(first),
                              height: height - top - bottom, 'data-phase': e.phase});
    band.style.fill = ['#f3f4f7', '#e8ebf1'][chart.querySelectorAll('.phase').length % 2];
    band.append(svg('title', {}, e.phase.replace('_', ' ')));
    chart.append(band);
    if (x(i + 1) - x(first) >= 6 * e.phase.length)
      chart.append(svg('text', {class: 'phase-label', x: (x(first) + x(i + 1)) / 2,
                                y: height - 5}, e.phase.replace('_', ' ')));
    first = i + 1;
  });
  for (const fraction of [0, 0.5, 1]) {
    const bytes = highest * 1.05 * fraction;
    chart.append(svg('text', {class: 'axis', x: left - 4, y: y(bytes) + 4}, gib(bytes)));
  }
  // The step line from the start (weights, optimizer states) through each event.
  let d = `M${x(0)},${y(t.timeline_start)}`;
  const dots = svg('g', {class: 'events'});
  events.forEach((e, i) => {
    d += `V${y(e.alive)}H${x(i + 1)}`;
    if (e.alive_last_layer != null)
      chart.append(svg('line', {class: 'run', x1: x(i + 0.5), x2: x(i + 0.5), y1: y(e.alive),
                                y2: y(e.alive_last_layer)}));
    const dot = svg('circle', {class: 'event', cx: x(i + 0.5), cy: y(e.alive), r: 1.6,
                               'data-alive': e.alive});
    dot.append(svg('title', {}, `${e.phase}: ${e.operator}, ${gib(e.alive)}` +
                   (e.alive_last_layer != null ? ` (last layer ${gib(e.alive_last_layer)})` : '')));
    dots.append(dot);
  });
  chart.append(svg('path', {class: 'step', d}), dots);
  chart.append(svg('line', {class: 'capacity', x1: left, x2: width - right, y1: y(capacity),
                            y2: y(capacity)}),
               svg('text', {class: 'capacity-label', x: width - right, y: y(capacity) - 3},
                   `GPU capacity ${gib(capacity)}`));
  // The peak: the event the tool names, at its bytes.
  const px = x(peak.index + 0.5);
  const marker = svg('circle', {class: 'peak', cx: px, cy: y(peak.alive), r: 4,
                                'data-bytes': peak.alive, 'data-index': peak.index});
  const layer = peak.layer == null ? '' : `, layer ${peak.layer}`;
  const label = svg('text', {class: 'peak-label', x: px, y: Math.max(y(peak.alive) - 7, 12),
                             'text-anchor': px > width / 2 ? 'end' : 'start'},
                    `peak: ${peak.operator} (${peak.phase}${layer}) ${gib(peak.alive)}`);
  chart.append(marker, label);
  const caption = document.createElement('figcaption');
  caption.textContent = `The step, event by event (${events.length} events; a vertical bar: ` +
      `a run of layers, up to its last layer): the bytes allocated after each, plus ` +
      `${gib(peak.runtime_overheads)} of runtime overheads at the peak.`;
  $('timeline').replaceChildren(chart, caption);
}

// Shows the knobs of the hash; `shown` tells a test which hash the figures are for.
function fromHash() {
  const state = new URLSearchParams(location.hash.slice(1));
  writeForm(state);
  show(readForm());
  document.body.dataset.shown = location.hash;
  document.body.dataset.status = 'ready';
}

function fromForm() {
  const hash = '#' + readForm().toString();
  history.replaceState(null, '', hash);
  fromHash();
}

createVramfit().then((module) => {
  run = module.cwrap('vramfit_run', 'string', ['string']);
  fillChoices();
  fromHash();
  $('knobs').addEventListener('change', fromForm);
  window.addEventListener('hashchange', fromHash);
});
