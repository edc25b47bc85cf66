// vramfit's page: runs the command-line tool compiled to WebAssembly (vramfit.js, built by em++
// from examples/web/api.cpp), `train -f json` or `infer -f json` with the form's options, and
// shows its JSON; for training a second run with `--timeline` gives the step's events, drawn as an
// SVG step line. The form is built at load time from the tool's parser (vramfit_options): every
// field's option name, kind, choices, default and help are the parser's, so this file only says
// where each goes. The knobs live in the address's hash (#mode=infer&model=llama-3-8b&batch=8), so
// a result can be shared.
'use strict';

// The tool's subcommands the page runs. `groups`: the fieldsets and the options in each, by the
// parser's names (any other option of the subcommand goes under "More options"); `omitted`: the
// options whose output the page does not show or that it sets itself; `when`: options shown only
// when the others make them count; `largest`: the two "what fits" rows' headings.
const lora = (state) => Number(state.get('lora-rank') || 0) > 0 || state.has('qlora');
const modes = {
  train: {
    groups: [['Model', ['model', 'framework']],
             ['Training', ['precision', 'optimizer', 'micro-batch', 'seq-len', 'grad-accum',
                           'recompute', 'attention']],
             ['Fine-tuning', ['lora-rank', 'qlora', 'lora-targets', 'lora-dtype', 'trainable']],
             ['Parallelism', ['dp', 'zero', 'fsdp', 'tp', 'sp', 'pp', 'cp', 'ep', 'offload']],
             ['GPU', ['gpu']]],
    // --timeline is the page's second run; --sweep, --explain and --params print other tables.
    omitted: ['format', 'check', 'timeline', 'explain', 'sweep', 'sweep-max', 'params'],
    when: {'lora-targets': lora, 'lora-dtype': lora},
    largest: ['Largest micro-batch that fits', 'Longest sequence that fits'],
  },
  infer: {
    groups: [['Model', ['model', 'weights']],
             ['Requests', ['batch', 'context', 'generate', 'beams', 'logits', 'prefill-chunk']],
             ['KV cache', ['kv-dtype', 'block']],
             ['Parallelism', ['tp', 'pp']],
             ['GPU', ['gpu', 'cuda-graphs']],
             ['vLLM serving', ['framework', 'utilization', 'max-num-batched-tokens',
                               'max-num-seqs', 'non-torch']]],
    // --params prints the weights alone.
    omitted: ['format', 'check', 'params'],
    when: {},
    largest: ['Largest batch that fits (at this context)',
              'Longest context that fits (at this batch)'],
  },
};
// The JSON's parts: an estimate's components at the peak, and what vLLM's serving budget
// (infer --utilization) requests of the GPU.
const components = ['weights', 'gradients', 'master_weights', 'optimizer_states', 'activations',
                    'kv_cache', 'buffers', 'overhead'];
const served = ['weights', 'profile_peak', 'non_torch', 'cuda_graphs', 'kv_pool'];
const colours = {weights: '#3b6fd4', gradients: '#e0892b', master_weights: '#7a4fc2',
                 optimizer_states: '#d14a61', activations: '#2f9e6e', kv_cache: '#8c6d3f',
                 buffers: '#5fa8c9', overhead: '#9aa3b5', profile_peak: '#2f9e6e',
                 non_torch: '#9aa3b5', cuda_graphs: '#5fa8c9', kv_pool: '#8c6d3f'};

const $ = (id) => document.getElementById(id);
let run = null;  // the tool: words -> {status, stdout, stderr}
let optionsOf = null;  // the parser: subcommand -> its options
const tables = {};  // subcommand -> Map(option name -> {name, kind, values, type, default, ...})
const labels = {model: {}, gpu: {}};  // preset key -> the text its choice shows
let mode = '';  // the subcommand the form is built for

function tool(args) {
  return JSON.parse(run(JSON.stringify(args)));
}

function gib(bytes) {
  return (bytes / 2 ** 30).toFixed(2) + ' GiB';
}

// The parser's options of each mode, and the preset lists' names for the model and GPU choices.
function readParser() {
  for (const name of Object.keys(modes)) {
    const listed = JSON.parse(optionsOf(name));
    if (listed.error) throw new Error(listed.error);
    tables[name] = new Map(listed.map((o) => [o.name, o]));
  }
  for (const m of JSON.parse(tool(['models', '-f', 'json']).stdout))
    labels.model[m.key] = `${m.name} (${m.key})`;
  for (const g of JSON.parse(tool(['gpus', '-f', 'json']).stdout))
    labels.gpu[g.key] = `${g.name} (${gib(g.capacity)})`;
}

function choice(select, value, text) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  return select.appendChild(o);
}

// One option's field: a checkbox for a flag, a list for an option with values, a number for an
// INT or FLOAT value, else text; empty is the tool's default, which the list's first entry or the
// placeholder names. The model and the GPU always have a value, the parser's default at first.
function field(o) {
  const label = document.createElement('label');
  label.title = o.description;
  let input;
  if (o.kind === 'flag') {
    input = document.createElement('input');
    input.type = 'checkbox';
    label.className = 'check';
    label.append(input, ' ' + o.name);
  } else {
    if (o.values.length > 0) {
      input = document.createElement('select');
      const fallback = o.default ? `(default: ${o.default})` : '(default)';
      if (!(o.name in labels)) choice(input, '', fallback);
      for (const value of o.values) choice(input, value, labels[o.name]?.[value] ?? value);
    } else {
      input = document.createElement('input');
      // A list's values are words (`--pp-stages 20,12`, `--trainable router expert:0-5`).
      input.type = o.kind !== 'list' && /^(INT|FLOAT)\b/.test(o.type) ? 'number' : 'text';
      if (o.type.startsWith('INT:POSITIVE')) input.min = '1';
      if (o.type.startsWith('FLOAT')) input.step = 'any';
      input.placeholder = o.default || 'default';
    }
    label.append(o.name + ' ', input);
    if (o.name in labels) label.className = 'wide';  // the presets' names are long
  }
  input.id = input.name = o.name;
  input.dataset.option = o.kind;
  input.dataset.default = o.default;
  return label;
}

function fieldset(legend, fields) {
  const set = document.createElement('fieldset');
  const title = document.createElement('legend');
  title.textContent = legend;
  set.append(title, ...fields);
  return set;
}

// The form of subcommand `name`: its groups, then every other option under "More options". A
// group's name the parser does not have is an error: the page would send an unknown option.
function buildForm(name) {
  const table = tables[name];
  const placed = new Set(modes[name].omitted);
  const sets = modes[name].groups.map(([legend, options]) => fieldset(legend, options.map((o) => {
    if (!table.has(o)) throw new Error(`vramfit ${name} has no option --${o}`);
    placed.add(o);
    return field(table.get(o));
  })));
  // `config`: a pasted config.json, the page's own knob, given to --model instead of the preset.
  const config = document.createElement('label');
  config.className = 'wide';
  config.innerHTML = 'or a Hugging Face config.json (pasted; used instead of the preset when ' +
      'given) <textarea id="config" name="config" rows="4" spellcheck="false" ' +
      'placeholder=\'{"model_type": "llama", ...}\'></textarea>';
  sets[0].append(config);
  const more = document.createElement('details');
  more.id = 'more';
  more.innerHTML = '<summary>More options</summary>';
  more.append(...[...table.values()].filter((o) => !placed.has(o.name)).map(field));
  $('fields').replaceChildren(...sets, more);
  mode = name;
}

// The fields in the form's order.
const fields = () => [...$('fields').querySelectorAll('input, select, textarea')];

// The knobs as the hash holds them: the mode when not training, the knobs set, the preset and the
// GPU always; an option that `when` hides is left out.
function readForm() {
  const state = new URLSearchParams();
  if (mode !== 'train') state.set('mode', mode);
  for (const f of fields()) {
    const value = f.type === 'checkbox' ? (f.checked ? '1' : '') : f.value.trim();
    if (value !== '') state.set(f.id, value);
  }
  for (const [name, shown] of Object.entries(modes[mode].when)) {
    const visible = shown(state);
    $(name).parentElement.hidden = !visible;
    if (!visible) state.delete(name);
  }
  return state;
}

// The hash's knobs into the form. A value that a list lacks (a link's `gpu=96GiB`, a capacity
// the tool takes) is added to it for this hash only, so that the tool, not the form, judges it.
function writeForm(state) {
  const wanted = state.get('mode') ?? 'train';
  if (!(wanted in modes)) throw new Error(`the page has no mode '${wanted}'`);
  if (wanted !== mode) buildForm(wanted);
  document.querySelector(`input[name=mode][value=${mode}]`).checked = true;
  for (const added of $('fields').querySelectorAll('option.added')) added.remove();
  for (const f of fields()) {
    const value = state.get(f.id);
    if (f.type === 'checkbox') {
      f.checked = value === '1';
      continue;
    }
    if (f.tagName === 'SELECT' && value !== null && ![...f.options].some((o) => o.value === value))
      choice(f, value, value).className = 'added';
    f.value = value ?? (f.id in labels ? f.dataset.default : '');
  }
}

// The tool's words for the knobs: a flag alone, a list's words each after its option.
function words(state) {
  const table = tables[mode];
  const args = [mode, '-f', 'json'];
  for (const [name, value] of state) {
    if (name === 'mode' || (name === 'model' && state.has('config'))) continue;
    const kind = name === 'config' ? 'value' : table.get(name).kind;
    const option = name === 'config' ? '--model' : '--' + name;
    if (kind === 'flag') args.push(option);
    else if (kind === 'list') for (const word of value.split(/\s+/)) args.push(option, word);
    else args.push(option, value);
  }
  return args;
}

function quote(word) {
  return /^[\w.,:=+-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

function show(state) {
  const args = words(state);
  const pasted = (i) => state.has('config') && args[i - 1] === '--model';
  $('command').textContent =
      'vramfit ' + args.map((w, i) => (pasted(i) ? 'config.json' : quote(w))).join(' ');
  const answer = tool(args);
  showError(answer.status !== 0 ? answer.stderr : '');
  if (answer.status !== 0) return;
  const r = JSON.parse(answer.stdout);
  showFit(r.kv_pool === undefined ? estimate(r, args) : serving(r));
  // The step's timeline: a second run, as `--timeline` leaves out the largest batch and sequence.
  const timeline = mode === 'train' ? tool([...args, '--timeline']) : {status: 1};
  if (timeline.status === 0) plot(JSON.parse(timeline.stdout), r.device.capacity);
  else $('timeline').replaceChildren();
}

// The tool's message (or the page's), or none: the figures are valid.
function showError(message) {
  $('error').hidden = message === '';
  $('error').textContent = message;
  $('result').dataset.valid = String(message === '');
}

// What the figures show of an estimate (train, infer): its peak against the GPU, the components
// at the peak, and the largest batch and sequence or context.
function estimate(r, args) {
  const [peak, capacity, name] = [r.memory.total, r.device.capacity, r.device.name];
  return {
    configuration: r.configuration, fits: r.fits, peak, capacity,
    verdict: r.fits
        ? `Fits on ${name}: ${gib(peak)} of ${gib(capacity)}, ${gib(capacity - peak)} free`
        : `Does not fit on ${name}: ${gib(peak)} of ${gib(capacity)}, ${gib(peak - capacity)} over`,
    headings: ['Peak per GPU', 'GPU capacity', ...modes[mode].largest, 'At the peak'],
    largest: mode === 'train' ? [r.max_micro_batch, r.max_sequence] : [r.max_batch, r.max_context],
    parts: components.map((c) => [c, r.at_peak[c] ?? 0]),
  };
}

// What the figures show of vLLM's serving budget (infer --utilization): what it requests of the
// GPU's total, in parts, and the sequences and tokens its KV pool holds; it fits when the pool
// holds the batch.
function serving(r) {
  const pool = `vLLM's KV pool on ${r.device.name} (${gib(r.kv_pool)}) holds ${r.sequences} ` +
      `sequences of this context, ${r.kv_tokens} tokens`;
  return {
    configuration: r.configuration, fits: r.fits, peak: r.requested, capacity: r.device.cuda_total,
    verdict: r.fits ? `Fits: ${pool}` : `Does not fit: ${pool}, fewer than the batch`,
    headings: ['Requested of the GPU (utilization)', 'GPU total (cudaMemGetInfo)',
               'Sequences the KV pool holds', 'Tokens the KV pool holds', 'Requested'],
    largest: [r.sequences, r.kv_tokens],
    parts: served.map((c) => [c, r[c]]),
  };
}

// The verdict, the figures, and the stacked bar of the parts against the larger of the total and
// the GPU.
function showFit(view) {
  const {peak, capacity} = view;
  $('configuration').textContent = view.configuration;
  const verdict = $('verdict');
  verdict.dataset.fits = String(view.fits);
  verdict.className = view.fits ? 'fits' : 'over';
  verdict.textContent = view.verdict;
  ['peak-label', 'capacity-label', 'max-batch-label', 'max-length-label', 'parts-label']
      .forEach((id, i) => { $(id).textContent = view.headings[i]; });
  $('peak-text').textContent = gib(peak);
  $('peak').textContent = String(peak);
  $('capacity-text').textContent = gib(capacity);
  $('capacity').textContent = String(capacity);
  $('max-batch').textContent = String(view.largest[0]);
  $('max-length').textContent = String(view.largest[1]);

  const scale = Math.max(peak, capacity);
  const bar = $('bar');
  const legend = $('legend');
  const rows = $('breakdown').tBodies[0];
  bar.replaceChildren();
  legend.replaceChildren();
  rows.replaceChildren();
  for (const [name, bytes] of view.parts) {
    const text = name.replace('_', ' ');
    const row = rows.insertRow();
    row.dataset.component = name;
    row.insertCell().textContent = text;
    row.insertCell().textContent = gib(bytes);
    row.insertCell().textContent = String(bytes);
    if (bytes <= 0) continue;
    const segment = document.createElement('div');
    segment.className = 'segment';
    segment.dataset.component = name;
    segment.style.width = `${(100 * bytes) / scale}%`;
    segment.style.background = colours[name];
    segment.title = `${text}: ${gib(bytes)}`;
    bar.appendChild(segment);
    const key = document.createElement('span');
    key.innerHTML = `<i style="background:${colours[name]}"></i>`;
    key.append(`${text} ${gib(bytes)}`);
    legend.appendChild(key);
  }
  const line = document.createElement('div');
  line.className = 'capacity';
  line.style.left = `calc(${(100 * capacity) / scale}% - 1px)`;
  line.title = `${gib(capacity)}`;
  bar.appendChild(line);
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

// Shows the knobs of the hash, written back as the form holds them (a knob the mode does not
// have is dropped); `shown` tells a test which hash the figures are for.
function fromHash() {
  try {
    writeForm(new URLSearchParams(location.hash.slice(1)));
    const state = readForm();
    history.replaceState(null, '', '#' + state.toString());
    show(state);
  } catch (e) {  // a hash the page cannot show (mode=plan), or an option the parser lacks
    showError(`vramfit page: ${e.message}`);
  }
  document.body.dataset.shown = location.hash;
  document.body.dataset.status = 'ready';
}

// A knob changed: the hash follows, and the mode with it; a new mode keeps the knobs it shares.
function fromForm(event) {
  const state = readForm();
  if (event.target.name === 'mode') {
    state.set('mode', event.target.value);
    if (event.target.value === 'train') state.delete('mode');
  }
  history.replaceState(null, '', '#' + state.toString());
  fromHash();
}

createVramfit().then((module) => {
  run = module.cwrap('vramfit_run', 'string', ['string']);
  optionsOf = module.cwrap('vramfit_options', 'string', ['string']);
  try {
    readParser();
  } catch (e) {  // the page and the tool disagree: say so rather than show nothing
    showError(`vramfit page: ${e.message}`);
    document.body.dataset.status = 'broken';
    return;
  }
  fromHash();
  $('knobs').addEventListener('change', fromForm);
  window.addEventListener('hashchange', fromHash);
});
