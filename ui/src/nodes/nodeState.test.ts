import { describe, expect, it } from 'vitest';
import type { Node, VirtualMachineInstance } from '../api/types';
import { drainMigration, drainPlan, nodeStatus, vmiCountByNode } from './nodeState';

const node = (ready: boolean, unschedulable = false): Node => ({
  metadata: { name: 'n1' },
  spec: { unschedulable },
  status: { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
});
const vmi = (name: string, nodeName: string, evictionStrategy?: string, phase = 'Running'): VirtualMachineInstance => ({
  metadata: { name, namespace: 'ns' },
  spec: { domain: { devices: {} }, evictionStrategy },
  status: { nodeName, phase },
});

describe('nodes', () => {
  it('shows kubectl-style status', () => {
    expect(nodeStatus(node(true))).toBe('Ready');
    expect(nodeStatus(node(false))).toBe('NotReady');
    expect(nodeStatus(node(true, true))).toBe('Ready,SchedulingDisabled');
  });
  it('counts live VMIs per node', () => {
    const counts = vmiCountByNode([vmi('a', 'n1'), vmi('b', 'n1'), vmi('c', 'n2'), vmi('d', 'n1', undefined, 'Succeeded')]);
    expect(Object.fromEntries(counts)).toEqual({ n1: 2, n2: 1 });
  });
  it('drains only LiveMigrate VMIs of that node', () => {
    const plan = drainPlan([vmi('a', 'n1', 'LiveMigrate'), vmi('b', 'n1'), vmi('c', 'n2', 'LiveMigrate')], 'n1');
    expect(plan.migrate.map((v) => v.metadata.name)).toEqual(['a']);
    expect(plan.stay.map((v) => v.metadata.name)).toEqual(['b']);
    expect(drainMigration('a')).toEqual({
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachineInstanceMigration',
      metadata: { generateName: 'drain-' },
      spec: { vmiName: 'a' },
    });
  });
});
