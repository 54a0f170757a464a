// DataVolumes: import state and progress, live; create and delete.
import { PageSection, Title, Toolbar, ToolbarContent, ToolbarItem } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useMemo, useState } from 'react';
import { api } from '../api/client';
import { paths } from '../api/paths';
import { can } from '../api/ssar';
import type { DataVolume } from '../api/types';
import { Age, useNow } from '../components/Age';
import { DeleteModal } from '../components/DeleteModal';
import { ErrorAlert } from '../components/ErrorAlert';
import { GatedButton } from '../components/GatedButton';
import { EmptyRow, LoadingRow } from '../components/ListState';
import { NamespaceSelect } from '../components/NamespaceSelect';
import { ProgressCell } from '../components/ProgressCell';
import { StatusLabel } from '../components/StatusLabel';
import { useNotify } from '../state/notify';
import { FALLBACK_NAMESPACE, useScopedList } from '../state/scoped';
import { parseProgress } from '../vm/vmState';
import { CreateDvModal } from './CreateDvModal';
import { dvSize, dvSourceText } from './manifest';

export function DataVolumesPage() {
  const dvs = useScopedList<DataVolume>(paths.dvs);
  const now = useNow();
  const notify = useNotify();
  const [creating, setCreating] = useState(false);
  const [deleting, setDeleting] = useState<DataVolume | null>(null);
  const rows = useMemo(
    () => [...dvs.items.values()].sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`)),
    [dvs.items],
  );
  const ns = dvs.namespace || FALLBACK_NAMESPACE;
  return (
    <>
      <PageSection>
        <Title headingLevel="h1">DataVolumes</Title>
      </PageSection>
      <PageSection>
        <Toolbar>
          <ToolbarContent>
            <ToolbarItem>
              <NamespaceSelect />
            </ToolbarItem>
            <ToolbarItem>
              <GatedButton variant="primary" attrs={can.createDv(ns)} onClick={() => setCreating(true)}>
                Create DataVolume
              </GatedButton>
            </ToolbarItem>
          </ToolbarContent>
        </Toolbar>
        {dvs.fatal ? <ErrorAlert error={dvs.error} title="Cannot list DataVolumes" /> : null}
        <Table aria-label="DataVolumes" isStickyHeader gridBreakPoint="grid-md" variant="compact">
          <Thead>
            <Tr>
              <Th>Name</Th>
              <Th>Namespace</Th>
              <Th>Source</Th>
              <Th>Size</Th>
              <Th>Phase</Th>
              <Th>Progress</Th>
              <Th>Age</Th>
              <Th screenReaderText="Actions" />
            </Tr>
          </Thead>
          <Tbody>
            {!dvs.loaded ? (
              <LoadingRow colSpan={8} />
            ) : rows.length === 0 ? (
              <EmptyRow colSpan={8} title="No DataVolumes" />
            ) : (
              rows.map((dv) => {
                const phase = dv.status?.phase ?? 'Pending';
                const pct = parseProgress(dv.status?.progress);
                return (
                  <Tr key={`${dv.metadata.namespace}/${dv.metadata.name}`}>
                    <Td dataLabel="Name">{dv.metadata.name}</Td>
                    <Td dataLabel="Namespace">{dv.metadata.namespace}</Td>
                    <Td dataLabel="Source" className="vp-mono vp-wrap" modifier="breakWord">
                      {dvSourceText(dv)}
                    </Td>
                    <Td dataLabel="Size">{dvSize(dv)}</Td>
                    <Td dataLabel="Phase">
                      <StatusLabel status={phase} />
                    </Td>
                    <Td dataLabel="Progress">
                      {pct !== undefined ? (
                        <ProgressCell value={pct} label={`Progress of ${dv.metadata.name}`} done={phase === 'Succeeded'} failed={phase === 'Failed'} />
                      ) : (
                        dv.status?.progress ?? '—'
                      )}
                    </Td>
                    <Td dataLabel="Age">
                      <Age timestamp={dv.metadata.creationTimestamp} now={now} />
                    </Td>
                    <Td dataLabel="Actions" isActionCell>
                      <GatedButton
                        variant="secondary"
                        size="sm"
                        attrs={{ group: 'cdi.kubevirt.io', resource: 'datavolumes', verb: 'delete', namespace: dv.metadata.namespace, name: dv.metadata.name }}
                        onClick={() => setDeleting(dv)}
                      >
                        Delete
                      </GatedButton>
                    </Td>
                  </Tr>
                );
              })
            )}
          </Tbody>
        </Table>
      </PageSection>
      {creating ? <CreateDvModal namespace={ns} onClose={() => setCreating(false)} /> : null}
      {deleting ? (
        <DeleteModal
          kind="DataVolume"
          name={deleting.metadata.name ?? ''}
          namespace={deleting.metadata.namespace}
          onClose={() => setDeleting(null)}
          onDelete={async () => {
            await api.del(paths.dv(deleting.metadata.namespace ?? '', deleting.metadata.name ?? ''));
            notify('success', `DataVolume ${deleting.metadata.name} deleted`);
          }}
        />
      ) : null}
    </>
  );
}
