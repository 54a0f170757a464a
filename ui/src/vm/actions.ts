// The lifecycle requests themselves (no UI): one function per action.
import { api } from '../api/client';
import { paths } from '../api/paths';
import type { VirtualMachineInstanceMigration } from '../api/types';

export const vmActions = {
  start: (ns: string, name: string) => api.put(paths.vmAction(ns, name, 'start'), {}),
  stop: (ns: string, name: string) => api.put(paths.vmAction(ns, name, 'stop'), {}),
  forceStop: (ns: string, name: string) => api.put(paths.vmAction(ns, name, 'stop'), { gracePeriod: 0 }),
  restart: (ns: string, name: string) => api.put(paths.vmAction(ns, name, 'restart'), {}),
  migrate: (ns: string, name: string, node?: string) =>
    api.put(
      paths.vmAction(ns, name, 'migrate'),
      node ? { addedNodeSelector: { 'kubernetes.io/hostname': node } } : {},
    ),
  pause: (ns: string, name: string) => api.put(paths.vmiAction(ns, name, 'pause'), {}),
  unpause: (ns: string, name: string) => api.put(paths.vmiAction(ns, name, 'unpause'), {}),
  softreboot: (ns: string, name: string) => api.put(paths.vmiAction(ns, name, 'softreboot'), {}),
  cancelMigration: (m: VirtualMachineInstanceMigration) =>
    api.del(paths.vmim(m.metadata.namespace ?? '', m.metadata.name ?? '')),
  deleteVm: (ns: string, name: string) => api.del(paths.vm(ns, name)),
};

/** Runs `fn` over `items` with at most `limit` at once; collects each failure. */
export async function runBounded<T>(
  items: T[],
  limit: number,
  fn: (item: T) => Promise<unknown>,
): Promise<{ item: T; error: unknown }[]> {
  const failures: { item: T; error: unknown }[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++];
      try {
        await fn(item);
      } catch (error) {
        failures.push({ item, error });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return failures;
}
