// Every migration in scope, live.
import { PageSection, Title, Toolbar, ToolbarContent, ToolbarItem } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useMemo } from 'react';
import { paths } from '../api/paths';
import type { VirtualMachineInstanceMigration } from '../api/types';
import { href, Link } from '../app/router';
import { ErrorAlert } from '../components/ErrorAlert';
import { EmptyRow, LoadingRow } from '../components/ListState';
import { NamespaceSelect } from '../components/NamespaceSelect';
import { StatusLabel } from '../components/StatusLabel';
import { useScopedList } from '../state/scoped';
import { MigrationRouteCells } from './MigrationRouteCells';
import { newestFirst } from './migrationState';

export function MigrationsPage() {
  const migrations = useScopedList<VirtualMachineInstanceMigration>(paths.vmims);
  const rows = useMemo(
    () =>
      [...migrations.items.values()].sort(newestFirst),
    [migrations.items],
  );
  return (
    <>
      <PageSection>
        <Title headingLevel="h1">Migrations</Title>
      </PageSection>
      <PageSection>
        <Toolbar>
          <ToolbarContent>
            <ToolbarItem>
              <NamespaceSelect />
            </ToolbarItem>
          </ToolbarContent>
        </Toolbar>
        {migrations.fatal ? <ErrorAlert error={migrations.error} title="Cannot list migrations" /> : null}
        <Table aria-label="Migrations" isStickyHeader gridBreakPoint="grid-md" variant="compact">
          <Thead>
            <Tr>
              <Th>Name</Th>
              <Th>Namespace</Th>
              <Th>VMI</Th>
              <Th>Phase</Th>
              <Th>Source node</Th>
              <Th>Target node</Th>
              <Th>Started</Th>
              <Th>Ended</Th>
            </Tr>
          </Thead>
          <Tbody>
            {!migrations.loaded ? (
              <LoadingRow colSpan={8} />
            ) : rows.length === 0 ? (
              <EmptyRow colSpan={8} title="No migrations" />
            ) : (
              rows.map((m) => {
                const ns = m.metadata.namespace ?? '';
                const state = m.status?.migrationState;
                const phase = m.status?.phase || 'Pending';
                return (
                  <Tr key={`${ns}/${m.metadata.name}`}>
                    <Td dataLabel="Name">{m.metadata.name}</Td>
                    <Td dataLabel="Namespace">{ns}</Td>
                    <Td dataLabel="VMI">
                      <Link to={href.vm(ns, m.spec.vmiName, 'migrations')}>{m.spec.vmiName}</Link>
                    </Td>
                    <Td dataLabel="Phase">
                      <StatusLabel status={phase} />
                    </Td>
                    <MigrationRouteCells migration={m} state={state} />
                  </Tr>
                );
              })
            )}
          </Tbody>
        </Table>
      </PageSection>
    </>
  );
}
