import { useEffect, useState } from 'react';
import { formatAge, formatTime } from '../api/time';

/** The current time, refreshed every `intervalMs` so ages keep counting. */
export function useNow(intervalMs = 30_000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(t);
  }, [intervalMs]);
  return now;
}

export function Age({ timestamp, now }: { timestamp?: string; now: number }) {
  return <time dateTime={timestamp} title={formatTime(timestamp)}>{formatAge(timestamp, now)}</time>;
}
