// The migrations of this VM's instance, with progress for the one under way (read from the
// source node's metrics) and what each finished one moved.
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../api/types';
import { ProgressCell } from '../../components/ProgressCell';
import { StatusLabel } from '../../components/StatusLabel';
import { MigrationRouteCells } from '../../migrations/MigrationRouteCells';
import { transferSummary, useLiveMigrationProgress } from '../../migrations/liveProgress';
import { newestFirst } from '../../migrations/migrationState';
import { isMigrationActive } from '../vmState';

export function MigrationsTab({
  vmi,
  name,
  migrations,
}: {
  vmi?: VirtualMachineInstance;
  name: string;
  migrations: VirtualMachineInstanceMigration[];
}) {
  const mine = migrations
    .filter((m) => m.spec.vmiName === name)
    .sort(newestFirst);
  // The VMI's migrationState describes its latest migration only.
  const stateOf = (m: VirtualMachineInstanceMigration) => {
    const vmiState = vmi?.status?.migrationState;
    return vmiState && vmiState.migrationUid === m.metadata.uid ? vmiState : m.status?.migrationState;
  };
  const active = mine.find(isMigrationActive);
  const live = useLiveMigrationProgress(
    !!active,
    (active && stateOf(active)?.sourceNode) ?? vmi?.status?.nodeName,
    vmi?.metadata.namespace ?? active?.metadata.namespace ?? '',
    name,
  );
  return (
    <Table aria-label="Migrations" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Name</Th>
          <Th>Phase</Th>
          <Th>Progress</Th>
          <Th>Source node</Th>
          <Th>Target node</Th>
          <Th>Started</Th>
          <Th>Ended</Th>
        </Tr>
      </Thead>
      <Tbody>
        {mine.length === 0 ? (
          <Tr>
            <Td colSpan={7}>This virtual machine has not been migrated.</Td>
          </Tr>
        ) : (
          mine.map((m) => {
            const phase = m.status?.phase || 'Pending';
            const state = stateOf(m);
            const pct = m === active ? live : phase === 'Succeeded' ? 100 : undefined;
            const moved = transferSummary(state);
            return (
              <Tr key={m.metadata.uid ?? m.metadata.name}>
                <Td dataLabel="Name">{m.metadata.name}</Td>
                <Td dataLabel="Phase">
                  <StatusLabel status={phase} />
                  {phase === 'Failed' && state?.failureReason ? <div>{state.failureReason}</div> : null}
                </Td>
                <Td dataLabel="Progress">
                  {pct !== undefined ? (
                    <ProgressCell
                      value={pct}
                      label={`Progress of migration ${m.metadata.name}`}
                      done={phase === 'Succeeded'}
                      failed={phase === 'Failed'}
                    />
                  ) : (
                    phase
                  )}
                  {moved ? <div>{moved}</div> : null}
                </Td>
                <MigrationRouteCells migration={m} state={state} />
              </Tr>
            );
          })
        )}
      </Tbody>
    </Table>
  );
}
