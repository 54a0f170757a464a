import { describe, expect, it } from 'vitest';
import type { VirtualMachineInstanceMigration } from '../api/types';
import { migrationTimes, newestFirst } from './migrationState';

const vmim = (name: string, created?: string): VirtualMachineInstanceMigration =>
  ({ metadata: { name, creationTimestamp: created }, spec: { vmiName: 'v' } }) as VirtualMachineInstanceMigration;

describe('migrations', () => {
  it('are listed newest first, those without a time last', () => {
    const list = [vmim('a', '2026-01-01T00:00:00Z'), vmim('none'), vmim('b', '2026-02-01T00:00:00Z')];
    expect(list.sort(newestFirst).map((m) => m.metadata.name)).toEqual(['b', 'a', 'none']);
  });

  it('start and end when their migrationState says, else by their phases', () => {
    const m = vmim('m', '2026-01-01T00:00:00Z');
    m.status = {
      phase: 'Succeeded',
      phaseTransitionTimestamps: [
        { phase: 'Running', phaseTransitionTimestamp: '2026-01-01T00:00:05Z' },
        { phase: 'Succeeded', phaseTransitionTimestamp: '2026-01-01T00:00:09Z' },
      ],
    } as VirtualMachineInstanceMigration['status'];
    expect(migrationTimes(m)).toEqual({ started: '2026-01-01T00:00:05Z', ended: '2026-01-01T00:00:09Z' });
    expect(migrationTimes(m, { startTimestamp: '2026-01-01T00:00:06Z' })).toEqual({
      started: '2026-01-01T00:00:06Z',
      ended: '2026-01-01T00:00:09Z',
    });
  });
});
