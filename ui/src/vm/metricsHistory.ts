// The Metrics tab's data: readings of PodMetrics and of the node's Prometheus counters,
// kept in memory per VM for the session (so leaving the tab keeps the history).
import { counterRate, sumSamples, type Sample } from '../api/metricsText';
import { parseQuantity } from '../api/quantity';
import type { PodMetrics } from '../api/types';

export const MAX_POINTS = 360; // an hour at one point per 10 s

export interface Counters {
  rx?: number;
  tx?: number;
  read?: number;
  write?: number;
}

export interface History {
  t: number[];
  cpu: (number | null)[];
  memory: (number | null)[];
  rx: (number | null)[];
  tx: (number | null)[];
  read: (number | null)[];
  write: (number | null)[];
  last?: { t: number; counters: Counters };
}

export function emptyHistory(): History {
  return { t: [], cpu: [], memory: [], rx: [], tx: [], read: [], write: [] };
}

/** CPU cores and memory bytes summed over a VM's pod containers. */
export function podUsage(pods: PodMetrics[]): { cpu: number | null; memory: number | null } {
  if (pods.length === 0) return { cpu: null, memory: null };
  let cpu = 0;
  let memory = 0;
  for (const p of pods)
    for (const c of p.containers ?? []) {
      const cc = parseQuantity(c.usage.cpu);
      const mm = parseQuantity(c.usage.memory);
      if (!Number.isNaN(cc)) cpu += cc;
      if (!Number.isNaN(mm)) memory += mm;
    }
  return { cpu, memory };
}

/** The VM's network and storage byte counters from a node scrape. */
export function vmCounters(samples: Sample[], namespace: string, name: string): Counters {
  const match: Record<string, string> = { name };
  // Scrapes label the namespace too; when they do, it must match (same name elsewhere).
  if (samples.some((s) => s.labels.namespace !== undefined)) match.namespace = namespace;
  return {
    rx: sumSamples(samples, 'kubevirt_vmi_network_receive_bytes_total', match),
    tx: sumSamples(samples, 'kubevirt_vmi_network_transmit_bytes_total', match),
    read: sumSamples(samples, 'kubevirt_vmi_storage_read_traffic_bytes_total', match),
    write: sumSamples(samples, 'kubevirt_vmi_storage_write_traffic_bytes_total', match),
  };
}

/** Appends one reading (t in Unix seconds); rates come from the previous counters. */
export function pushPoint(
  h: History,
  t: number,
  usage: { cpu: number | null; memory: number | null },
  counters: Counters | null,
): History {
  const dt = h.last ? t - h.last.t : 0;
  const rate = (k: keyof Counters) => (counters && h.last ? counterRate(h.last.counters[k], counters[k], dt) : null);
  const trim = <T,>(a: T[], v: T) => [...a, v].slice(-MAX_POINTS);
  return {
    t: trim(h.t, t),
    cpu: trim(h.cpu, usage.cpu),
    memory: trim(h.memory, usage.memory),
    rx: trim(h.rx, rate('rx')),
    tx: trim(h.tx, rate('tx')),
    read: trim(h.read, rate('read')),
    write: trim(h.write, rate('write')),
    last: counters ? { t, counters } : undefined,
  };
}

const histories = new Map<string, History>();

export function getHistory(key: string): History {
  return histories.get(key) ?? emptyHistory();
}

export function setHistory(key: string, h: History): void {
  histories.set(key, h);
}
