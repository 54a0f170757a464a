// Network: the VM's interfaces (spec) merged with what the guest reports (status).
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { Interface, Network, VirtualMachine, VirtualMachineInstance } from '../../api/types';

export function binding(i: Interface | undefined): string {
  if (!i) return '—';
  if (i.binding) return i.binding.name;
  for (const b of ['masquerade', 'bridge', 'sriov', 'passt'] as const) if (i[b]) return b;
  return '—';
}

function networkSource(n: Network | undefined): string {
  if (!n) return '—';
  if (n.pod) return 'Pod network';
  if (n.multus) return `Multus ${n.multus.networkName}`;
  return '—';
}

export function NetworkTab({ vm, vmi }: { vm: VirtualMachine; vmi?: VirtualMachineInstance }) {
  const spec = vmi?.spec ?? vm.spec.template.spec;
  const ifaces = spec.domain.devices.interfaces ?? [];
  const networks = new Map((spec.networks ?? []).map((n) => [n.name, n]));
  const status = vmi?.status?.interfaces ?? [];
  const names = [...new Set([...ifaces.map((i) => i.name), ...status.map((s) => s.name ?? '').filter(Boolean)])];
  // Guest-only interfaces (no name) are still worth showing.
  const unnamed = status.filter((s) => !s.name);
  return (
    <Table aria-label="Network interfaces" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Name</Th>
          <Th>MAC</Th>
          <Th>IP addresses</Th>
          <Th>Binding</Th>
          <Th>Network</Th>
        </Tr>
      </Thead>
      <Tbody>
        {names.length + unnamed.length === 0 ? (
          <Tr>
            <Td colSpan={5}>No network interfaces.</Td>
          </Tr>
        ) : null}
        {names.map((n) => {
          const i = ifaces.find((x) => x.name === n);
          const s = status.find((x) => x.name === n);
          const ips = s?.ipAddresses ?? (s?.ipAddress ? [s.ipAddress] : []);
          return (
            <Tr key={n}>
              <Td dataLabel="Name">{n}</Td>
              <Td dataLabel="MAC" className="vp-mono">
                {s?.mac ?? i?.macAddress ?? '—'}
              </Td>
              <Td dataLabel="IP addresses" className="vp-mono">
                {ips.length ? ips.join(', ') : '—'}
              </Td>
              <Td dataLabel="Binding">{binding(i)}</Td>
              <Td dataLabel="Network">{networkSource(networks.get(n))}</Td>
            </Tr>
          );
        })}
        {unnamed.map((s, idx) => (
          <Tr key={`guest-${idx}`}>
            <Td dataLabel="Name">{s.interfaceName ?? '(guest)'}</Td>
            <Td dataLabel="MAC" className="vp-mono">
              {s.mac ?? '—'}
            </Td>
            <Td dataLabel="IP addresses" className="vp-mono">
              {(s.ipAddresses ?? (s.ipAddress ? [s.ipAddress] : [])).join(', ') || '—'}
            </Td>
            <Td dataLabel="Binding">—</Td>
            <Td dataLabel="Network">—</Td>
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}
