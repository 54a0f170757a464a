// The cells every migrations table ends with: where the guest went from and to, and when.
import { Td } from '@patternfly/react-table';
import { formatTime } from '../api/time';
import type { MigrationState, VirtualMachineInstanceMigration } from '../api/types';
import { migrationTimes } from './migrationState';

export function MigrationRouteCells({
  migration,
  state,
}: {
  migration: VirtualMachineInstanceMigration;
  state: MigrationState | undefined;
}) {
  const t = migrationTimes(migration, state);
  return (
    <>
      <Td dataLabel="Source node">{state?.sourceNode ?? '—'}</Td>
      <Td dataLabel="Target node">{state?.targetNode ?? '—'}</Td>
      <Td dataLabel="Started">{formatTime(t.started)}</Td>
      <Td dataLabel="Ended">{formatTime(t.ended)}</Td>
    </>
  );
}
