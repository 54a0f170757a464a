// Nodes: readiness, capacity, how many VMs run on each, and cordon/uncordon/drain.
import {
  Button,
  List,
  ListItem,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  PageSection,
  Title,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useMemo, useState } from 'react';
import { api } from '../api/client';
import { paths } from '../api/paths';
import { formatMemoryQuantity } from '../api/quantity';
import { can } from '../api/ssar';
import type { Node, VirtualMachineInstance } from '../api/types';
import { ErrorAlert } from '../components/ErrorAlert';
import { GatedButton } from '../components/GatedButton';
import { EmptyRow, LoadingRow } from '../components/ListState';
import { StatusLabel } from '../components/StatusLabel';
import { useList } from '../state/informers';
import { useNotify } from '../state/notify';
import { runBounded } from '../vm/actions';
import { drainMigration, drainPlan, nodeStatus, vmiCountByNode } from './nodeState';

export function setUnschedulable(name: string, unschedulable: boolean) {
  return api.mergePatch(paths.node(name), { spec: { unschedulable } });
}

const SHOWN = 20;

function VmiList({ vmis }: { vmis: VirtualMachineInstance[] }) {
  return (
    <List>
      {vmis.slice(0, SHOWN).map((v) => (
        <ListItem key={`${v.metadata.namespace}/${v.metadata.name}`}>
          {v.metadata.namespace}/{v.metadata.name}
        </ListItem>
      ))}
      {vmis.length > SHOWN ? <ListItem>and {vmis.length - SHOWN} more</ListItem> : null}
    </List>
  );
}

function DrainModal({ node, vmis, onClose }: { node: string; vmis: VirtualMachineInstance[]; onClose: () => void }) {
  const notify = useNotify();
  const plan = drainPlan(vmis, node);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const drain = async () => {
    setBusy(true);
    setError(null);
    try {
      await setUnschedulable(node, true);
      const failures = await runBounded(plan.migrate, 4, (vmi) =>
        api.post(paths.vmims(vmi.metadata.namespace), drainMigration(vmi.metadata.name ?? '')),
      );
      if (failures.length) {
        notify(
          'danger',
          `Node ${node} cordoned; ${failures.length} migration(s) could not be created`,
          failures.map((f) => `${f.item.metadata.name}: ${(f.error as Error).message}`).join('; '),
        );
      } else {
        notify('success', `Node ${node} cordoned; ${plan.migrate.length} migration(s) created`);
      }
      onClose();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };
  return (
    <Modal isOpen variant="small" onClose={onClose} aria-labelledby="drain-title">
      <ModalHeader title={`Drain ${node}?`} labelId="drain-title" titleIconVariant="warning" />
      <ModalBody>
        <p>The node is cordoned, then each virtual machine that allows live migration is moved away.</p>
        {plan.migrate.length ? (
          <>
            <p>Migrated ({plan.migrate.length}):</p>
            <VmiList vmis={plan.migrate} />
          </>
        ) : (
          <p>No virtual machine on this node allows live migration.</p>
        )}
        {plan.stay.length ? (
          <>
            <p>Left running here (eviction strategy is not LiveMigrate) ({plan.stay.length}):</p>
            <VmiList vmis={plan.stay} />
          </>
        ) : null}
        <ErrorAlert error={error} />
      </ModalBody>
      <ModalFooter>
        <Button variant="warning" onClick={() => void drain()} isLoading={busy} isDisabled={busy}>
          Drain
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}

export function NodesPage() {
  const nodes = useList<Node>(paths.nodes());
  const vmis = useList<VirtualMachineInstance>(paths.vmis());
  const notify = useNotify();
  const [busy, setBusy] = useState('');
  const [draining, setDraining] = useState('');
  const counts = useMemo(() => vmiCountByNode(vmis.items.values()), [vmis.items]);
  const rows = useMemo(
    () => [...nodes.items.values()].sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? '')),
    [nodes.items],
  );

  const cordon = async (name: string, on: boolean) => {
    setBusy(name);
    try {
      await setUnschedulable(name, on);
      notify('success', `Node ${name} ${on ? 'cordoned' : 'uncordoned'}`);
    } catch (e) {
      notify('danger', `${on ? 'Cordon' : 'Uncordon'} failed`, (e as Error).message);
    } finally {
      setBusy('');
    }
  };

  return (
    <>
      <PageSection>
        <Title headingLevel="h1">Nodes</Title>
      </PageSection>
      <PageSection>
        {nodes.fatal ? <ErrorAlert error={nodes.error} title="Cannot list nodes" /> : null}
        <Table aria-label="Nodes" isStickyHeader gridBreakPoint="grid-md" variant="compact">
          <Thead>
            <Tr>
              <Th>Name</Th>
              <Th>Status</Th>
              <Th>CPU (capacity / allocatable)</Th>
              <Th>Memory (capacity / allocatable)</Th>
              <Th>VMs</Th>
              <Th screenReaderText="Actions" />
            </Tr>
          </Thead>
          <Tbody>
            {!nodes.loaded ? (
              <LoadingRow colSpan={6} />
            ) : rows.length === 0 ? (
              <EmptyRow colSpan={6} title="No nodes" />
            ) : (
              rows.map((n) => {
                const name = n.metadata.name ?? '';
                const cap = n.status?.capacity ?? {};
                const alloc = n.status?.allocatable ?? {};
                const unschedulable = !!n.spec?.unschedulable;
                return (
                  <Tr key={name}>
                    <Td dataLabel="Name">{name}</Td>
                    <Td dataLabel="Status">
                      {nodeStatus(n)
                        .split(',')
                        .map((s) => (
                          <span key={s} style={{ marginRight: 4 }}>
                            <StatusLabel status={s} />
                          </span>
                        ))}
                    </Td>
                    <Td dataLabel="CPU">
                      {cap.cpu ?? '—'} / {alloc.cpu ?? '—'}
                    </Td>
                    <Td dataLabel="Memory">
                      {formatMemoryQuantity(cap.memory)} / {formatMemoryQuantity(alloc.memory)}
                    </Td>
                    <Td dataLabel="VMs">{vmis.fatal ? '—' : counts.get(name) ?? 0}</Td>
                    <Td dataLabel="Actions" isActionCell>
                      <span className="vp-nowrap">
                        <GatedButton
                          variant="secondary"
                          size="sm"
                          attrs={can.patchNode(name)}
                          busy={busy === name}
                          onClick={() => void cordon(name, !unschedulable)}
                        >
                          {unschedulable ? 'Uncordon' : 'Cordon'}
                        </GatedButton>{' '}
                        <GatedButton
                          variant="warning"
                          size="sm"
                          attrs={can.patchNode(name)}
                          onClick={() => setDraining(name)}
                        >
                          Drain
                        </GatedButton>
                      </span>
                    </Td>
                  </Tr>
                );
              })
            )}
          </Tbody>
        </Table>
      </PageSection>
      {draining ? <DrainModal node={draining} vmis={[...vmis.items.values()]} onClose={() => setDraining('')} /> : null}
    </>
  );
}
