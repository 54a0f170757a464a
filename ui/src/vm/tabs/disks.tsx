// Disks: each volume with its bus and source, and the import state of DataVolumes.
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { paths } from '../../api/paths';
import type { DataVolume, Disk, VirtualMachine, Volume } from '../../api/types';
import { ProgressCell } from '../../components/ProgressCell';
import { StatusLabel } from '../../components/StatusLabel';
import { useList } from '../../state/informers';
import { parseProgress } from '../vmState';

export interface DiskRow {
  name: string;
  type: string;
  bus: string;
  source: string;
  dataVolume?: string;
}

export function volumeSource(v: Volume | undefined): { source: string; dataVolume?: string } {
  if (!v) return { source: '—' };
  if (v.containerDisk) return { source: `Container disk ${v.containerDisk.image}` };
  if (v.dataVolume) return { source: `DataVolume ${v.dataVolume.name}`, dataVolume: v.dataVolume.name };
  if (v.persistentVolumeClaim) return { source: `PVC ${v.persistentVolumeClaim.claimName}` };
  if (v.cloudInitNoCloud) return { source: 'cloud-init (NoCloud)' };
  if (v.cloudInitConfigDrive) return { source: 'cloud-init (ConfigDrive)' };
  if (v.emptyDisk) return { source: `Empty disk ${v.emptyDisk.capacity}` };
  if (v.hostDisk) return { source: `Host disk ${v.hostDisk.path}` };
  const kind = Object.keys(v).find((k) => k !== 'name');
  return { source: kind ?? '—' };
}

export function diskRows(vm: VirtualMachine): DiskRow[] {
  const spec = vm.spec.template.spec;
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const disks: Disk[] = spec.domain.devices.disks ?? [];
  const rows: DiskRow[] = disks.map((d) => {
    const type = d.cdrom ? 'cdrom' : d.lun ? 'lun' : 'disk';
    const bus = d.disk?.bus ?? d.cdrom?.bus ?? d.lun?.bus ?? 'virtio';
    return { name: d.name, type, bus, ...volumeSource(volumes.get(d.name)) };
  });
  // Volumes without a disk entry still get a default disk in KubeVirt.
  for (const v of spec.volumes ?? []) {
    if (!disks.some((d) => d.name === v.name)) rows.push({ name: v.name, type: 'disk', bus: 'virtio', ...volumeSource(v) });
  }
  return rows;
}

export function DisksTab({ vm }: { vm: VirtualMachine }) {
  const ns = vm.metadata.namespace ?? '';
  const rows = diskRows(vm);
  const needsDvs = rows.some((r) => r.dataVolume);
  const dvs = useList<DataVolume>(needsDvs ? paths.dvs(ns) : null);
  return (
    <Table aria-label="Disks" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Name</Th>
          <Th>Type</Th>
          <Th>Bus</Th>
          <Th>Source</Th>
          <Th>DataVolume phase</Th>
          <Th>Progress</Th>
        </Tr>
      </Thead>
      <Tbody>
        {rows.length === 0 ? (
          <Tr>
            <Td colSpan={6}>No disks.</Td>
          </Tr>
        ) : (
          rows.map((r) => {
            const dv = r.dataVolume ? dvs.items.get(`${ns}/${r.dataVolume}`) : undefined;
            const phase = dv?.status?.phase;
            const progress = parseProgress(dv?.status?.progress);
            return (
              <Tr key={r.name}>
                <Td dataLabel="Name">{r.name}</Td>
                <Td dataLabel="Type">{r.type}</Td>
                <Td dataLabel="Bus">{r.bus}</Td>
                <Td dataLabel="Source" className="vp-mono vp-wrap">
                  {r.source}
                </Td>
                <Td dataLabel="DataVolume phase">{phase ? <StatusLabel status={phase} /> : r.dataVolume ? 'Pending' : '—'}</Td>
                <Td dataLabel="Progress">
                  {progress !== undefined ? (
                    <ProgressCell
                      value={progress}
                      label={`Import progress of ${r.dataVolume}`}
                      done={phase === 'Succeeded'}
                      failed={phase === 'Failed'}
                    />
                  ) : (
                    '—'
                  )}
                </Td>
              </Tr>
            );
          })
        )}
      </Tbody>
    </Table>
  );
}
