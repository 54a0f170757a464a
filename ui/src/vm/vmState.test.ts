import { describe, expect, it } from 'vitest';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration } from '../api/types';
import { actionApplicability, activeMigration, parseProgress, runStrategy, statusColor, type VmAction } from './vmState';

const vm = (spec: Partial<VirtualMachine['spec']> = {}): VirtualMachine => ({
  metadata: { name: 'v', namespace: 'n' },
  spec: { template: { spec: { domain: { devices: {} } } }, ...spec },
});
const vmi = (phase: string, conditions: { type: string; status: string; message?: string }[] = []): VirtualMachineInstance => ({
  metadata: { name: 'v', namespace: 'n' },
  spec: { domain: { devices: {} } },
  status: { phase, conditions },
});

const ALL: VmAction[] = ['start', 'stop', 'forceStop', 'restart', 'pause', 'unpause', 'softreboot', 'migrate', 'cancelMigration', 'delete'];
const enabled = (v: VirtualMachine, i?: VirtualMachineInstance, migrating = false) =>
  ALL.filter((a) => actionApplicability(a, v, i, migrating).ok);

describe('actionApplicability', () => {
  it('a stopped VM can start or be deleted', () => {
    expect(enabled(vm({ runStrategy: 'Halted' }))).toEqual(['start', 'delete']);
  });
  it('a running VM can do everything but start, unpause and cancel', () => {
    expect(enabled(vm({ runStrategy: 'Always' }), vmi('Running'))).toEqual([
      'stop', 'forceStop', 'restart', 'pause', 'softreboot', 'migrate', 'delete',
    ]);
  });
  it('a paused VM can unpause, not pause or soft reboot', () => {
    const e = enabled(vm({ runStrategy: 'Always' }), vmi('Running', [{ type: 'Paused', status: 'True' }]));
    expect(e).toContain('unpause');
    expect(e).not.toContain('pause');
    expect(e).not.toContain('softreboot');
  });
  it('a migrating VM can cancel but not migrate again', () => {
    const e = enabled(vm({ runStrategy: 'Always' }), vmi('Running'), true);
    expect(e).toContain('cancelMigration');
    expect(e).not.toContain('migrate');
  });
  it('migrate explains a non-migratable VM', () => {
    const r = actionApplicability('migrate', vm({ runStrategy: 'Always' }), vmi('Running', [{ type: 'LiveMigratable', status: 'False', message: 'hostDisk' }]), false);
    expect(r).toEqual({ ok: false, reason: 'hostDisk' });
  });
  it('Always without an instance (crash loop) can still be stopped, not started', () => {
    expect(enabled(vm({ runStrategy: 'Always' }))).toEqual(['stop', 'forceStop', 'delete']);
  });
  it('reads the legacy running field', () => {
    expect(runStrategy(vm({ running: true }))).toBe('Always');
    expect(runStrategy(vm({ running: false }))).toBe('Halted');
  });
});

describe('activeMigration', () => {
  const m = (name: string, vmiName: string, phase?: string): VirtualMachineInstanceMigration => ({
    metadata: { name, namespace: 'n' },
    spec: { vmiName },
    status: phase ? { phase } : undefined,
  });
  it('finds the unfinished migration of the VMI', () => {
    const list = [m('a', 'v', 'Succeeded'), m('b', 'other', 'Running'), m('c', 'v', 'Running')];
    expect(activeMigration(list, 'v', 'n')?.metadata.name).toBe('c');
    expect(activeMigration([m('a', 'v', 'Failed')], 'v', 'n')).toBeUndefined();
    expect(activeMigration([m('p', 'v')], 'v', 'n')?.metadata.name).toBe('p');
  });
});

describe('progress', () => {
  it('reads CDI progress strings', () => {
    expect(parseProgress('45.2%')).toBe(45.2);
    expect(parseProgress('N/A')).toBeUndefined();
    expect(parseProgress(undefined)).toBeUndefined();
  });
  it('colors statuses', () => {
    expect(statusColor('Running')).toBe('green');
    expect(statusColor('ErrImagePull')).toBe('red');
    expect(statusColor('Stopped')).toBe('grey');
  });
});
