// Readings of Node objects shared by the pages.
import type { Node, VirtualMachineInstance } from '../api/types';

export function nodeReady(n: Node): boolean {
  return n.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
}

/** kubectl's STATUS column: "Ready", "NotReady", "Ready,SchedulingDisabled". */
export function nodeStatus(n: Node): string {
  const base = nodeReady(n) ? 'Ready' : 'NotReady';
  return n.spec?.unschedulable ? `${base},SchedulingDisabled` : base;
}

/** VMIs per node name. */
export function vmiCountByNode(vmis: Iterable<VirtualMachineInstance>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const vmi of vmis) {
    const node = vmi.status?.nodeName;
    if (!node) continue;
    const phase = vmi.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') continue;
    counts.set(node, (counts.get(node) ?? 0) + 1);
  }
  return counts;
}

/** The VMIs a drain moves (evictionStrategy LiveMigrate) and the ones it leaves. */
export function drainPlan(
  vmis: Iterable<VirtualMachineInstance>,
  node: string,
): { migrate: VirtualMachineInstance[]; stay: VirtualMachineInstance[] } {
  const migrate: VirtualMachineInstance[] = [];
  const stay: VirtualMachineInstance[] = [];
  for (const vmi of vmis) {
    if (vmi.status?.nodeName !== node) continue;
    const phase = vmi.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') continue;
    if (vmi.spec.evictionStrategy === 'LiveMigrate') migrate.push(vmi);
    else stay.push(vmi);
  }
  return { migrate, stay };
}

export function drainMigration(vmiName: string) {
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstanceMigration',
    metadata: { generateName: 'drain-' },
    spec: { vmiName },
  };
}
