import type { MigrationState, VirtualMachineInstanceMigration } from '../api/types';

/** When a migration started and ended: from its migrationState, else its phase history. */
export function migrationTimes(
  m: VirtualMachineInstanceMigration,
  state: MigrationState | undefined = m.status?.migrationState,
): { started?: string; ended?: string } {
  const transitions = m.status?.phaseTransitionTimestamps ?? [];
  const at = (phase: string) => transitions.find((t) => t.phase === phase)?.phaseTransitionTimestamp;
  return {
    started: state?.startTimestamp ?? at('Running') ?? at('Scheduling') ?? m.metadata.creationTimestamp,
    ended: state?.endTimestamp ?? at('Succeeded') ?? at('Failed'),
  };
}

/** Orders migrations newest first (by creation time). */
export function newestFirst(a: VirtualMachineInstanceMigration, b: VirtualMachineInstanceMigration): number {
  const at = (m: VirtualMachineInstanceMigration) => m.metadata.creationTimestamp ?? '';
  return at(a) < at(b) ? 1 : at(a) > at(b) ? -1 : 0;
}
