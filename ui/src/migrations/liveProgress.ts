// A migration's progress while it moves the guest. KubeVirt's migrationState has no
// progress fields; the source node's metrics do (the same QEMU readings virt-handler
// exports): how much guest memory there is to move and how much is left.
import { useEffect, useState } from 'react';
import { rawRequest } from '../api/client';
import { parsePrometheusText, type Sample } from '../api/metricsText';
import { paths } from '../api/paths';
import { formatBytes } from '../api/quantity';
import { can } from '../api/ssar';
import type { MigrationState } from '../api/types';
import { useAccess } from '../state/access';

/** How often the source node's metrics are read while a migration is under way. */
export const PROGRESS_POLL_MS = 500;

/**
 * Percent of the guest's memory moved, from one scrape of the source node: (total -
 * remaining) / total. Undefined when the node reports no migration of that VMI (not
 * started yet, or already handed over).
 */
export function progressFromMetrics(samples: Sample[], namespace: string, name: string): number | undefined {
  const mine = (metric: string) =>
    samples.find((s) => s.name === metric && s.labels.namespace === namespace && s.labels.name === name)?.value;
  const total = mine('kubevirt_vmi_migration_data_bytes_total');
  const remaining = mine('kubevirt_vmi_migration_data_remaining_bytes');
  if (remaining === undefined) return undefined;
  if (total && total > 0) return clamp(((total - remaining) / total) * 100);
  const processed = mine('kubevirt_vmi_migration_data_processed_bytes');
  if (processed === undefined || processed + remaining <= 0) return undefined;
  return clamp((processed / (processed + remaining)) * 100);
}

function clamp(pct: number): number {
  return Math.max(0, Math.min(100, pct));
}

/**
 * The live progress of VMI `namespace/name`'s migration from `sourceNode`, read while
 * `active`; undefined when unknown or when the user may not read the node's metrics
 * (nodes/proxy), so that nothing is polled for users who cannot see it.
 */
export function useLiveMigrationProgress(
  active: boolean,
  sourceNode: string | undefined,
  namespace: string,
  name: string,
): number | undefined {
  const allowed = useAccess(active && sourceNode ? can.nodeProxy(sourceNode) : null);
  const [pct, setPct] = useState<number | undefined>(undefined);
  useEffect(() => {
    setPct(undefined);
    if (!active || !sourceNode || !allowed) return;
    let live = true;
    const tick = async () => {
      try {
        const text = await (await rawRequest('GET', paths.nodeMetrics(sourceNode))).text();
        const next = progressFromMetrics(parsePrometheusText(text), namespace, name);
        // Memory is sent again as the guest dirties it: the bar never moves back.
        if (live && next !== undefined) setPct((before) => Math.max(before ?? 0, next));
      } catch {
        // A missed reading leaves the last one shown; the next tick tries again.
      }
    };
    void tick();
    const timer = setInterval(() => void tick(), PROGRESS_POLL_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [active, sourceNode, allowed, namespace, name]);
  return active ? pct : undefined;
}

/** What a finished migration moved, from its migrationState: "24 MiB in 1.2 s, downtime 33 ms". */
export function transferSummary(state: MigrationState | undefined): string | undefined {
  const t = state?.transfer;
  if (!state?.completed || state.failed || !t) return undefined;
  const moved = (t.memoryBytes ?? 0) + (t.diskBytes ?? 0);
  const parts = [`${formatBytes(moved)} in ${seconds(t.totalTimeMilliseconds ?? 0)}`];
  if (t.downtimeMilliseconds !== undefined) parts.push(`downtime ${t.downtimeMilliseconds} ms`);
  return parts.join(', ');
}

function seconds(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}
