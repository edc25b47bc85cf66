// vramfit's page: runs the command-line tool compiled to WebAssembly (vramfit.js, built by em++
// from examples/web/api.cpp) with `train -f json` and the knobs' options, and shows its JSON.
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
