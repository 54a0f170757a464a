// Which lifecycle actions make sense for a VM in its current state, and small readings
// of VM/VMI/migration status the pages share.
import type {
  Condition,
  VirtualMachine,
  VirtualMachineInstance,
  VirtualMachineInstanceMigration,
} from '../api/types';

export type VmAction =
  | 'start'
  | 'stop'
  | 'forceStop'
  | 'restart'
  | 'pause'
  | 'unpause'
  | 'softreboot'
  | 'migrate'
  | 'cancelMigration'
  | 'delete';

export interface Applicability {
  ok: boolean;
  reason: string;
}

const FINAL_VMI_PHASES = new Set(['Succeeded', 'Failed']);
const FINAL_MIGRATION_PHASES = new Set(['Succeeded', 'Failed']);

export function runStrategy(vm: VirtualMachine): string {
  if (vm.spec.runStrategy) return vm.spec.runStrategy;
  if (vm.spec.running !== undefined) return vm.spec.running ? 'Always' : 'Halted';
  return vm.status?.runStrategy ?? 'Halted';
}

export function condition(conditions: Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

export function isPaused(vmi: VirtualMachineInstance | undefined): boolean {
  return condition(vmi?.status?.conditions, 'Paused')?.status === 'True';
}

export function isMigrationActive(m: VirtualMachineInstanceMigration): boolean {
  return !FINAL_MIGRATION_PHASES.has(m.status?.phase ?? '') && !m.metadata.deletionTimestamp;
}

/** The unfinished migration of a VMI, if one exists. */
export function activeMigration(
  migrations: Iterable<VirtualMachineInstanceMigration>,
  vmiName: string,
  namespace: string,
): VirtualMachineInstanceMigration | undefined {
  for (const m of migrations) {
    if (m.spec.vmiName === vmiName && m.metadata.namespace === namespace && isMigrationActive(m)) return m;
  }
  return undefined;
}

export function actionApplicability(
  action: VmAction,
  vm: VirtualMachine,
  vmi: VirtualMachineInstance | undefined,
  migrating: boolean,
): Applicability {
  const yes = { ok: true, reason: '' };
  const no = (reason: string) => ({ ok: false, reason });
  const strategy = runStrategy(vm);
  const vmiPhase = vmi?.status?.phase ?? '';
  const vmiLive = !!vmi && !FINAL_VMI_PHASES.has(vmiPhase) && !vmi.metadata.deletionTimestamp;
  const running = vmiLive && vmiPhase === 'Running';
  const paused = isPaused(vmi);
  if (vm.metadata.deletionTimestamp) return no('The virtual machine is being deleted.');

  switch (action) {
    case 'start':
      if (vmiLive) return no('The virtual machine is already running.');
      if (strategy === 'Always') return no('The run strategy is Always: it starts by itself.');
      return yes;
    case 'stop':
    case 'forceStop':
      if (vmiLive || (strategy !== 'Halted' && strategy !== 'Manual')) return yes;
      return no('The virtual machine is not running.');
    case 'restart':
      return running ? yes : no('The virtual machine is not running.');
    case 'pause':
      if (!running) return no('The virtual machine is not running.');
      return paused ? no('The virtual machine is already paused.') : yes;
    case 'unpause':
      return paused ? yes : no('The virtual machine is not paused.');
    case 'softreboot':
      if (!running) return no('The virtual machine is not running.');
      return paused ? no('A paused virtual machine cannot reboot.') : yes;
    case 'migrate': {
      if (!running) return no('The virtual machine is not running.');
      if (migrating) return no('A migration is already in progress.');
      const lm = condition(vmi?.status?.conditions, 'LiveMigratable');
      if (lm && lm.status === 'False') return no(lm.message || 'The virtual machine cannot be live-migrated.');
      return yes;
    }
    case 'cancelMigration':
      return migrating ? yes : no('No migration is in progress.');
    case 'delete':
      return yes;
  }
}

/** Parses CDI's "45.2%" progress; undefined for "N/A" or nothing. */
export function parseProgress(p: string | undefined): number | undefined {
  if (!p) return undefined;
  const m = /^\s*([\d.]+)\s*%\s*$/.exec(p);
  if (!m) return undefined;
  const n = parseFloat(m[1]);
  return Number.isFinite(n) ? Math.max(0, Math.min(100, n)) : undefined;
}

export type LabelColor = 'green' | 'red' | 'orange' | 'blue' | 'grey' | 'purple' | 'yellow' | 'teal';

export function statusColor(status: string): LabelColor {
  switch (status) {
    case 'Running':
    case 'Succeeded':
    case 'Ready':
    case 'Bound':
      return 'green';
    case 'Stopped':
      return 'grey';
    case 'Paused':
      return 'yellow';
    case 'Migrating':
    case 'Starting':
    case 'Stopping':
    case 'Provisioning':
    case 'Terminating':
    case 'WaitForFirstConsumer':
    case 'ImportInProgress':
    case 'UploadReady':
    case 'UploadScheduled':
    case 'Scheduling':
    case 'Scheduled':
    case 'PreparingTarget':
    case 'TargetReady':
    case 'Pending':
      return 'blue';
    default:
      return /^Err|Error|Fail|BackOff|NotFound|Unschedulable|NotReady/.test(status) ? 'red' : 'grey';
  }
}
