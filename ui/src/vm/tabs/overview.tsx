// Overview: where the VM runs, its addresses, guest OS, conditions and labels.
import {
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
  Label,
  LabelGroup,
  Title,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { ReactNode } from 'react';
import { formatTime } from '../../api/time';
import type { Condition, VirtualMachine, VirtualMachineInstance } from '../../api/types';
import { Age, useNow } from '../../components/Age';
import { runStrategy } from '../vmState';

function item(term: string, value: ReactNode) {
  return (
    <DescriptionListGroup key={term}>
      <DescriptionListTerm>{term}</DescriptionListTerm>
      <DescriptionListDescription>{value}</DescriptionListDescription>
    </DescriptionListGroup>
  );
}

export function guestOs(vmi: VirtualMachineInstance | undefined): string {
  const g = vmi?.status?.guestOSInfo;
  if (!g) return '';
  const name = g.prettyName || [g.name || g.id, g.version].filter(Boolean).join(' ');
  return [name, g.kernelRelease ? `(kernel ${g.kernelRelease})` : ''].filter(Boolean).join(' ');
}

export function OverviewTab({ vm, vmi }: { vm: VirtualMachine; vmi?: VirtualMachineInstance }) {
  const now = useNow();
  const spec = vm.spec.template.spec;
  const ips = (vmi?.status?.interfaces ?? []).flatMap((i) => i.ipAddresses ?? (i.ipAddress ? [i.ipAddress] : []));
  const labels = Object.entries(vm.metadata.labels ?? {});
  const conditions: (Condition & { source: string })[] = [
    ...(vm.status?.conditions ?? []).map((c) => ({ ...c, source: 'VirtualMachine' })),
    ...(vmi?.status?.conditions ?? []).map((c) => ({ ...c, source: 'Instance' })),
  ];
  return (
    <>
      <DescriptionList isHorizontal isCompact columnModifier={{ default: '1Col', lg: '2Col' }} aria-label="Overview">
        {item('Status', vm.status?.printableStatus ?? '—')}
        {item('Phase', vmi?.status?.phase ?? 'No instance')}
        {item('Node', vmi?.status?.nodeName ?? '—')}
        {item('IP addresses', ips.length ? <span className="vp-mono">{ips.join(', ')}</span> : '—')}
        {item('Guest OS', guestOs(vmi) || '—')}
        {item('Run strategy', runStrategy(vm))}
        {item('CPU cores', String(spec.domain.cpu?.cores ?? 1))}
        {item('Memory', spec.domain.memory?.guest ?? spec.domain.resources?.requests?.memory ?? '—')}
        {item('Eviction strategy', spec.evictionStrategy ?? '—')}
        {item(
          'Created',
          <>
            {formatTime(vm.metadata.creationTimestamp)} (<Age timestamp={vm.metadata.creationTimestamp} now={now} /> ago)
          </>,
        )}
        {item(
          'Labels',
          labels.length ? (
            <LabelGroup numLabels={10}>
              {labels.map(([k, v]) => (
                <Label key={k} isCompact>
                  {k}={v}
                </Label>
              ))}
            </LabelGroup>
          ) : (
            'None'
          ),
        )}
      </DescriptionList>
      <Title headingLevel="h2" size="lg" style={{ marginTop: 24 }}>
        Conditions
      </Title>
      <Table aria-label="Conditions" variant="compact" gridBreakPoint="grid-md">
        <Thead>
          <Tr>
            <Th>Object</Th>
            <Th>Type</Th>
            <Th>Status</Th>
            <Th>Reason</Th>
            <Th>Message</Th>
            <Th>Last transition</Th>
          </Tr>
        </Thead>
        <Tbody>
          {conditions.length === 0 ? (
            <Tr>
              <Td colSpan={6}>No conditions.</Td>
            </Tr>
          ) : (
            conditions.map((c) => (
              <Tr key={`${c.source}/${c.type}`}>
                <Td dataLabel="Object">{c.source}</Td>
                <Td dataLabel="Type">{c.type}</Td>
                <Td dataLabel="Status">{c.status}</Td>
                <Td dataLabel="Reason">{c.reason ?? ''}</Td>
                <Td dataLabel="Message" className="vp-wrap">{c.message ?? ''}</Td>
                <Td dataLabel="Last transition">
                  {c.lastTransitionTime ? <Age timestamp={c.lastTransitionTime} now={now} /> : '—'}
                </Td>
              </Tr>
            ))
          )}
        </Tbody>
      </Table>
    </>
  );
}
