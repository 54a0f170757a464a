import { describe, expect, it } from 'vitest';
import type { VirtualMachine, VirtualMachineInstance } from '../api/types';
import { distinct, filterRows, joinRows, NO_FILTER, parseLabelSelector, sortRows, vmIp, vmNode } from './filter';

function vm(ns: string, name: string, status: string, labels: Record<string, string> = {}, created = '2024-01-01T00:00:00Z'): VirtualMachine {
  return {
    metadata: { namespace: ns, name, labels, creationTimestamp: created },
    spec: { template: { spec: { domain: { devices: {} } } } },
    status: { printableStatus: status },
  };
}
function vmi(ns: string, name: string, node: string, ip?: string): VirtualMachineInstance {
  return {
    metadata: { namespace: ns, name },
    spec: { domain: { devices: {} } },
    status: { nodeName: node, interfaces: ip ? [{ name: 'default', ipAddress: ip }] : [] },
  };
}

const vms = new Map(
  [
    vm('a', 'web-1', 'Running', { app: 'web', tier: 'front' }, '2024-01-03T00:00:00Z'),
    vm('a', 'web-2', 'Stopped', { app: 'web' }, '2024-01-02T00:00:00Z'),
    vm('b', 'db-1', 'Running', { app: 'db', tier: 'back' }, '2024-01-01T00:00:00Z'),
  ].map((v) => [`${v.metadata.namespace}/${v.metadata.name}`, v]),
);
const vmis = new Map([
  ['a/web-1', vmi('a', 'web-1', 'n1', '10.0.0.5')],
  ['b/db-1', vmi('b', 'db-1', 'n2')],
]);
const rows = joinRows(vms, vmis);
const names = (r: { vm: VirtualMachine }[]) => r.map((x) => x.vm.metadata.name);

describe('label selectors', () => {
  const l = { app: 'web', tier: 'front' };
  it.each([
    ['app=web', true],
    ['app==web', true],
    ['app!=web', false],
    ['app=web,tier=front', true],
    ['app=web,tier=back', false],
    ['tier in (front, back)', true],
    ['tier notin (front)', false],
    ['tier', true],
    ['!tier', false],
    ['missing!=x', true],
    ['', true],
  ])('%s', (sel, want) => {
    expect(parseLabelSelector(sel)(l)).toBe(want);
  });
  it('rejects nonsense', () => {
    expect(() => parseLabelSelector('app=(web')).toThrow();
  });
});

describe('filterRows', () => {
  it('joins the VMI for node and IP', () => {
    const web1 = rows.find((r) => r.key === 'a/web-1')!;
    expect(vmNode(web1)).toBe('n1');
    expect(vmIp(web1.vmi)).toBe('10.0.0.5');
    expect(vmNode(rows.find((r) => r.key === 'a/web-2')!)).toBe('');
  });
  it('filters by name substring, case-insensitively', () => {
    expect(names(filterRows(rows, { ...NO_FILTER, name: 'WEB' }).rows).sort()).toEqual(['web-1', 'web-2']);
  });
  it('filters by label, node and phase together', () => {
    expect(names(filterRows(rows, { ...NO_FILTER, labelSelector: 'app=web' }).rows).sort()).toEqual(['web-1', 'web-2']);
    expect(names(filterRows(rows, { ...NO_FILTER, node: 'n2' }).rows)).toEqual(['db-1']);
    expect(names(filterRows(rows, { ...NO_FILTER, phase: 'Running', labelSelector: 'tier' }).rows).sort()).toEqual(['db-1', 'web-1']);
  });
  it('reports a bad selector and does not filter by it', () => {
    const r = filterRows(rows, { ...NO_FILTER, labelSelector: 'a in (' });
    expect(r.selectorError).toBeTruthy();
    expect(r.rows).toHaveLength(3);
  });
  it('stays quick with 10,000 rows', () => {
    const many = new Map<string, VirtualMachine>();
    for (let i = 0; i < 10_000; i++) many.set(`ns/vm-${i}`, vm('ns', `vm-${i}`, i % 2 ? 'Running' : 'Stopped', { i: String(i % 7) }));
    const big = joinRows(many, new Map());
    const t0 = performance.now();
    const f = filterRows(big, { ...NO_FILTER, name: 'vm-1', labelSelector: 'i in (1,2)', phase: 'Running' });
    sortRows(f.rows, 'name', 'desc');
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(f.rows.length).toBeGreaterThan(0);
  });
});

describe('sortRows', () => {
  it('sorts by column and direction, ties by key', () => {
    expect(names(sortRows(rows, 'name', 'asc'))).toEqual(['db-1', 'web-1', 'web-2']);
    expect(names(sortRows(rows, 'name', 'desc'))).toEqual(['web-2', 'web-1', 'db-1']);
    expect(names(sortRows(rows, 'status', 'asc'))).toEqual(['web-1', 'db-1', 'web-2']);
  });
  it('ascending age is youngest first', () => {
    expect(names(sortRows(rows, 'age', 'asc'))).toEqual(['web-1', 'web-2', 'db-1']);
  });
  it('lists distinct values for the selects', () => {
    expect(distinct(rows, vmNode)).toEqual(['n1', 'n2']);
  });
});
