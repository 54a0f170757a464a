// Kubernetes resource quantities ("12m", "1500000n", "256Mi", "1e3") and their display.

const DECIMAL: Record<string, number> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

const BINARY: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$/;

/** The value of a quantity in base units (cores, bytes); NaN if it is not one. */
export function parseQuantity(q: string | number | undefined | null): number {
  if (typeof q === 'number') return q;
  if (q == null) return NaN;
  const m = QUANTITY.exec(q.trim());
  if (!m) return NaN;
  const n = parseFloat(m[1]);
  if (m[2]) return n * 10 ** parseInt(m[2].slice(1), 10);
  const suffix = m[3] ?? '';
  return n * (BINARY[suffix] ?? DECIMAL[suffix]);
}

/** Whether a string is a valid quantity (for form validation). */
export function isQuantity(q: string): boolean {
  return !Number.isNaN(parseQuantity(q));
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** 1536 -> "1.5 KiB". */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '—';
  let v = Math.abs(n);
  let i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  const digits = i === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return `${n < 0 ? '-' : ''}${Number(v.toFixed(digits))} ${BYTE_UNITS[i]}`;
}

/** 0.0125 -> "12.5m", 2 -> "2" (CPU cores the kubectl way). */
export function formatCores(cores: number): string {
  if (!Number.isFinite(cores)) return '—';
  if (cores !== 0 && Math.abs(cores) < 1) {
    const milli = cores * 1000;
    return `${milli >= 10 ? Math.round(milli) : Number(milli.toFixed(1))}m`;
  }
  return String(Number(cores.toFixed(2)));
}

/** A capacity quantity for display: memory as bytes, everything else as is. */
export function formatMemoryQuantity(q: string | undefined): string {
  if (!q) return '—';
  const n = parseQuantity(q);
  return Number.isNaN(n) ? q : formatBytes(n);
}
