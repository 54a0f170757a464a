// Ages and timestamps the way kubectl shows them.

/** Age of a timestamp relative to `now`: "45s", "12m", "3h5m", "4d", "2y". */
export function formatAge(timestamp: string | undefined, now: number = Date.now()): string {
  if (!timestamp) return '—';
  const t = Date.parse(timestamp);
  if (Number.isNaN(t)) return '—';
  let s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 120) return `${s}s`;
  let m = Math.floor(s / 60);
  s %= 60;
  if (m < 10) return s ? `${m}m${s}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  let h = Math.floor(m / 60);
  m %= 60;
  if (h < 8) return m ? `${h}h${m}m` : `${h}h`;
  if (h < 48) return `${h}h`;
  let d = Math.floor(h / 24);
  h %= 24;
  if (d < 8) return h ? `${d}d${h}h` : `${d}d`;
  if (d < 365 * 2) return `${d}d`;
  const y = Math.floor(d / 365);
  d %= 365;
  return y < 8 && d ? `${y}y${d}d` : `${y}y`;
}

/** A timestamp in the reader's locale, or a dash. */
export function formatTime(timestamp: string | undefined): string {
  if (!timestamp) return '—';
  const t = new Date(timestamp);
  return Number.isNaN(t.getTime()) ? timestamp : t.toLocaleString();
}
