// The detail page's lifecycle buttons, each gated by permission and by the VM's state.
import { Button, Content, Flex, FlexItem } from '@patternfly/react-core';
import { useState } from 'react';
import { can, type ResourceAttributes } from '../api/ssar';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration } from '../api/types';
import { href, navigate } from '../app/router';
import { copyText } from '../components/clipboard';
import { DeleteModal } from '../components/DeleteModal';
import { GatedButton } from '../components/GatedButton';
import { useNotify } from '../state/notify';
import { vmActions } from './actions';
import { MigrateModal } from './MigrateModal';
import { actionApplicability, type VmAction } from './vmState';

interface Props {
  vm: VirtualMachine;
  vmi?: VirtualMachineInstance;
  migration?: VirtualMachineInstanceMigration;
}

export function ActionsBar({ vm, vmi, migration }: Props) {
  const ns = vm.metadata.namespace ?? '';
  const name = vm.metadata.name ?? '';
  const notify = useNotify();
  const [busy, setBusy] = useState<VmAction | ''>('');
  const [modal, setModal] = useState<'' | 'migrate' | 'delete'>('');

  const run = async (action: VmAction, label: string, fn: () => Promise<unknown>) => {
    setBusy(action);
    try {
      await fn();
      notify('success', `${label}: requested for ${name}`);
    } catch (e) {
      notify('danger', `${label} failed`, e instanceof Error ? e.message : String(e));
    } finally {
      setBusy('');
    }
  };

  const button = (
    action: VmAction,
    label: string,
    attrs: ResourceAttributes | null,
    onClick: () => void,
    variant: 'primary' | 'secondary' | 'danger' | 'warning' = 'secondary',
  ) => {
    const a = actionApplicability(action, vm, vmi, !!migration);
    return (
      <FlexItem>
        <GatedButton
          variant={variant}
          size="sm"
          attrs={attrs}
          applicable={a.ok}
          notApplicableReason={a.reason}
          busy={busy === action}
          onClick={onClick}
        >
          {label}
        </GatedButton>
      </FlexItem>
    );
  };

  const virtctl = `virtctl console ${name} -n ${ns}`;
  const virtplane = `virtplane vm console ${name} -n ${ns}`;

  return (
    <>
      <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'wrap' }} role="toolbar" aria-label="Virtual machine actions">
        {button('start', 'Start', can.vmAction(ns, name, 'start'), () => void run('start', 'Start', () => vmActions.start(ns, name)), 'primary')}
        {button('stop', 'Stop', can.vmAction(ns, name, 'stop'), () => void run('stop', 'Stop', () => vmActions.stop(ns, name)))}
        {button('forceStop', 'Force stop', can.vmAction(ns, name, 'stop'), () => void run('forceStop', 'Force stop', () => vmActions.forceStop(ns, name)), 'warning')}
        {button('restart', 'Restart', can.vmAction(ns, name, 'restart'), () => void run('restart', 'Restart', () => vmActions.restart(ns, name)))}
        {button('pause', 'Pause', can.vmiAction(ns, name, 'pause'), () => void run('pause', 'Pause', () => vmActions.pause(ns, name)))}
        {button('unpause', 'Unpause', can.vmiAction(ns, name, 'unpause'), () => void run('unpause', 'Unpause', () => vmActions.unpause(ns, name)))}
        {button('softreboot', 'Soft reboot', can.vmiAction(ns, name, 'softreboot'), () => void run('softreboot', 'Soft reboot', () => vmActions.softreboot(ns, name)))}
        {button('migrate', 'Migrate', can.vmAction(ns, name, 'migrate'), () => setModal('migrate'))}
        {button(
          'cancelMigration',
          'Cancel migration',
          migration ? can.deleteMigration(ns, migration.metadata.name) : can.deleteMigration(ns),
          () => migration && void run('cancelMigration', 'Cancel migration', () => vmActions.cancelMigration(migration)),
        )}
        {button('delete', 'Delete', can.deleteVm(ns, name), () => setModal('delete'), 'danger')}
        <FlexItem>
          <Button
            variant="tertiary"
            size="sm"
            onClick={() =>
              void copyText(virtctl).then(
                () => notify('info', 'Copied to the clipboard', virtctl),
                (e: Error) => notify('danger', 'Copy failed', e.message),
              )
            }
          >
            Copy virtctl command
          </Button>
        </FlexItem>
      </Flex>
      <Content component="small" className="vp-cli-hint">
        Console from a terminal: <code>{virtctl}</code> or <code>{virtplane}</code>
      </Content>
      {modal === 'migrate' ? (
        <MigrateModal
          vmName={name}
          currentNode={vmi?.status?.nodeName}
          onClose={() => setModal('')}
          onMigrate={async (node) => {
            await vmActions.migrate(ns, name, node);
            notify('success', `Migration of ${name} requested${node ? ` to ${node}` : ''}`);
          }}
        />
      ) : null}
      {modal === 'delete' ? (
        <DeleteModal
          kind="VirtualMachine"
          name={name}
          namespace={ns}
          onClose={() => setModal('')}
          onDelete={async () => {
            await vmActions.deleteVm(ns, name);
            notify('success', `VirtualMachine ${name} deleted`);
            navigate(href.vms());
          }}
        />
      ) : null}
    </>
  );
}
