// The events about this VM (and its instance, which shares its name), live.
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useMemo } from 'react';
import { withQuery } from '../../api/client';
import { paths } from '../../api/paths';
import type { KubeEvent } from '../../api/types';
import { Age, useNow } from '../../components/Age';
import { ErrorAlert } from '../../components/ErrorAlert';
import { EmptyRow, LoadingRow } from '../../components/ListState';
import { useList } from '../../state/informers';

export function eventTime(e: KubeEvent): string {
  return e.lastTimestamp ?? e.series?.lastObservedTime ?? e.eventTime ?? e.firstTimestamp ?? e.metadata.creationTimestamp ?? '';
}

export function EventsTab({ namespace, name }: { namespace: string; name: string }) {
  const now = useNow(10_000);
  const events = useList<KubeEvent>(withQuery(paths.events(namespace), { fieldSelector: `involvedObject.name=${name}` }));
  const rows = useMemo(
    () => [...events.items.values()].sort((a, b) => (eventTime(b) < eventTime(a) ? -1 : eventTime(b) > eventTime(a) ? 1 : 0)),
    [events.items],
  );
  return (
    <>
      {events.fatal ? <ErrorAlert error={events.error} title="Cannot list events" /> : null}
      <Table aria-label="Events" variant="compact" gridBreakPoint="grid-md">
        <Thead>
          <Tr>
            <Th>Type</Th>
            <Th>Reason</Th>
            <Th>Object</Th>
            <Th>Message</Th>
            <Th>Count</Th>
            <Th>Last seen</Th>
          </Tr>
        </Thead>
        <Tbody>
          {!events.loaded ? (
            <LoadingRow colSpan={6} />
          ) : rows.length === 0 ? (
            <EmptyRow colSpan={6} title="No events" />
          ) : (
            rows.map((e) => (
              <Tr key={e.metadata.uid ?? e.metadata.name}>
                <Td dataLabel="Type">{e.type ?? ''}</Td>
                <Td dataLabel="Reason">{e.reason ?? ''}</Td>
                <Td dataLabel="Object">{e.involvedObject.kind ?? ''}</Td>
                <Td dataLabel="Message" className="vp-wrap">{e.message ?? ''}</Td>
                <Td dataLabel="Count">{e.series?.count ?? e.count ?? 1}</Td>
                <Td dataLabel="Last seen">
                  <Age timestamp={eventTime(e)} now={now} />
                </Td>
              </Tr>
            ))
          )}
        </Tbody>
      </Table>
    </>
  );
}
