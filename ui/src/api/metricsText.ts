// A parser for the Prometheus text exposition format (what /metrics serves), and the
// counter arithmetic the charts need.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
  timestampMs?: number;
}

function parseValue(s: string): number {
  switch (s) {
    case 'NaN':
      return NaN;
    case '+Inf':
    case 'Inf':
      return Infinity;
    case '-Inf':
      return -Infinity;
    default:
      return Number(s);
  }
}

/** Parses `{a="x",b="y\"z"}` starting at `text[i] === '{'`; returns labels and the index after `}`. */
function parseLabels(text: string, start: number): [Record<string, string>, number] {
  const labels: Record<string, string> = {};
  let i = start + 1;
  const n = text.length;
  const skipSpace = () => {
    while (i < n && (text[i] === ' ' || text[i] === '\t')) i++;
  };
  for (;;) {
    skipSpace();
    if (text[i] === '}') return [labels, i + 1];
    let name = '';
    if (text[i] === '"') {
      // Quoted label names (the UTF-8 form of newer exposition formats).
      const [v, next] = readQuoted(text, i);
      name = v;
      i = next;
    } else {
      const m = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i));
      if (!m) throw new Error(`bad label name at ${i}`);
      name = m[0];
      i += name.length;
    }
    skipSpace();
    if (text[i] !== '=') throw new Error(`expected = at ${i}`);
    i++;
    skipSpace();
    const [value, next] = readQuoted(text, i);
    labels[name] = value;
    i = next;
    skipSpace();
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`expected , or } at ${i}`);
  }
}

function readQuoted(text: string, start: number): [string, number] {
  if (text[start] !== '"') throw new Error(`expected " at ${start}`);
  let out = '';
  let i = start + 1;
  while (i < text.length) {
    const c = text[i];
    if (c === '\\') {
      const e = text[i + 1];
      out += e === 'n' ? '\n' : e === '\\' ? '\\' : e === '"' ? '"' : `\\${e ?? ''}`;
      i += 2;
    } else if (c === '"') {
      return [out, i + 1];
    } else {
      out += c;
      i++;
    }
  }
  throw new Error('unterminated label value');
}

/** Parses every sample of an exposition; comment lines and malformed lines are skipped. */
export function parsePrometheusText(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    try {
      const m = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
      let name = '';
      let labels: Record<string, string> = {};
      let i = 0;
      if (m) {
        name = m[0];
        i = name.length;
        while (line[i] === ' ' || line[i] === '\t') i++;
        if (line[i] === '{') [labels, i] = parseLabels(line, i);
      } else if (line[0] === '{') {
        // `{"metric.name", a="b"} 1`: the name is the first quoted entry.
        const [all, next] = parseQuotedNameBlock(line);
        ({ name, labels } = all);
        i = next;
      } else {
        continue;
      }
      const rest = line.slice(i).trim().split(/\s+/);
      if (rest.length === 0 || rest[0] === '') continue;
      const value = parseValue(rest[0]);
      if (Number.isNaN(value) && rest[0] !== 'NaN') continue;
      const sample: Sample = { name, labels, value };
      if (rest[1] !== undefined) {
        const ts = Number(rest[1]);
        if (Number.isFinite(ts)) sample.timestampMs = ts;
      }
      samples.push(sample);
    } catch {
      // One bad line does not spoil the scrape.
    }
  }
  return samples;
}

function parseQuotedNameBlock(line: string): [{ name: string; labels: Record<string, string> }, number] {
  const [name, afterName] = readQuoted(line, 1);
  let rest = afterName;
  while (line[rest] === ' ') rest++;
  if (line[rest] === '}') return [{ name, labels: {} }, rest + 1];
  if (line[rest] !== ',') throw new Error('expected ,');
  // Re-use the label parser from the comma (it expects an opening brace there).
  const [labels, end] = parseLabels(line, rest);
  return [{ name, labels }, end];
}

/** Sum of the samples of one metric whose labels include all of `match`. */
export function sumSamples(samples: Sample[], name: string, match: Record<string, string> = {}): number | undefined {
  let sum: number | undefined;
  for (const s of samples) {
    if (s.name !== name) continue;
    let ok = true;
    for (const [k, v] of Object.entries(match)) {
      if (s.labels[k] !== v) {
        ok = false;
        break;
      }
    }
    if (ok) sum = (sum ?? 0) + s.value;
  }
  return sum;
}

/** Per-second rate of a counter between two readings; a reset counts from zero. */
export function counterRate(prev: number | undefined, cur: number | undefined, seconds: number): number | null {
  if (prev === undefined || cur === undefined || !(seconds > 0)) return null;
  const delta = cur >= prev ? cur - prev : cur;
  return delta / seconds;
}
