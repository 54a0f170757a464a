// Minimal shapes of the Kubernetes and KubeVirt objects the console reads. Only the
// fields it uses are typed; everything else passes through untouched.

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: { kind: string; name: string; uid: string }[];
  managedFields?: unknown[];
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export interface ListMeta {
  resourceVersion?: string;
  continue?: string;
  remainingItemCount?: number;
}

export interface KubeList<T> {
  apiVersion?: string;
  kind?: string;
  metadata: ListMeta;
  items: T[];
}

export interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
  lastProbeTime?: string;
}

export interface Disk {
  name: string;
  disk?: { bus?: string };
  cdrom?: { bus?: string };
  lun?: { bus?: string };
  bootOrder?: number;
}

export interface Interface {
  name: string;
  macAddress?: string;
  masquerade?: Record<string, never>;
  bridge?: Record<string, never>;
  sriov?: Record<string, never>;
  passt?: Record<string, never>;
  binding?: { name: string };
  model?: string;
}

export interface Network {
  name: string;
  pod?: { vmNetworkCIDR?: string };
  multus?: { networkName: string; default?: boolean };
}

export interface Volume {
  name: string;
  containerDisk?: { image: string };
  dataVolume?: { name: string };
  persistentVolumeClaim?: { claimName: string };
  cloudInitNoCloud?: { userData?: string; networkData?: string };
  cloudInitConfigDrive?: { userData?: string };
  emptyDisk?: { capacity: string };
  hostDisk?: { path: string };
  [other: string]: unknown;
}

export interface VmiSpec {
  domain: {
    cpu?: { cores?: number; sockets?: number; threads?: number };
    memory?: { guest?: string };
    resources?: { requests?: Record<string, string> };
    devices: {
      disks?: Disk[];
      interfaces?: Interface[];
      autoattachPodInterface?: boolean;
    };
  };
  networks?: Network[];
  volumes?: Volume[];
  evictionStrategy?: string;
  terminationGracePeriodSeconds?: number;
  nodeSelector?: Record<string, string>;
}

export interface DataVolumeSpec {
  source?: {
    http?: { url: string };
    registry?: { url: string };
    blank?: Record<string, never>;
    upload?: Record<string, never>;
    pvc?: { name: string; namespace: string };
  };
  storage?: { resources?: { requests?: { storage?: string } } };
  pvc?: { resources?: { requests?: { storage?: string } } };
}

export interface DataVolumeTemplate {
  metadata: ObjectMeta;
  spec: DataVolumeSpec;
}

export interface VirtualMachine extends KubeObject {
  spec: {
    running?: boolean;
    runStrategy?: string;
    template: { metadata?: ObjectMeta; spec: VmiSpec };
    dataVolumeTemplates?: DataVolumeTemplate[];
  };
  status?: {
    printableStatus?: string;
    created?: boolean;
    ready?: boolean;
    runStrategy?: string;
    conditions?: Condition[];
  };
}

export interface MigrationState {
  migrationUid?: string;
  sourceNode?: string;
  targetNode?: string;
  startTimestamp?: string;
  endTimestamp?: string;
  completed?: boolean;
  failed?: boolean;
  failureReason?: string;
  mode?: string;
  /** virtplane's account of a finished migration (what moved, how long it took). */
  transfer?: {
    totalTimeMilliseconds?: number;
    downtimeMilliseconds?: number;
    setupTimeMilliseconds?: number;
    memoryBytes?: number;
    diskBytes?: number;
  };
}

export interface VmiInterfaceStatus {
  name?: string;
  interfaceName?: string;
  mac?: string;
  ipAddress?: string;
  ipAddresses?: string[];
  infoSource?: string;
}

export interface VirtualMachineInstance extends KubeObject {
  spec: VmiSpec;
  status?: {
    phase?: string;
    nodeName?: string;
    reason?: string;
    conditions?: Condition[];
    interfaces?: VmiInterfaceStatus[];
    guestOSInfo?: {
      id?: string;
      name?: string;
      prettyName?: string;
      version?: string;
      versionId?: string;
      kernelRelease?: string;
      kernelVersion?: string;
      machine?: string;
    };
    migrationState?: MigrationState;
  };
}

export interface VirtualMachineInstanceMigration extends KubeObject {
  spec: { vmiName: string; addedNodeSelector?: Record<string, string> };
  status?: {
    phase?: string;
    phaseTransitionTimestamps?: { phase: string; phaseTransitionTimestamp: string }[];
    migrationState?: MigrationState;
    conditions?: Condition[];
  };
}

export interface Node extends KubeObject {
  spec?: { unschedulable?: boolean };
  status?: {
    capacity?: Record<string, string>;
    allocatable?: Record<string, string>;
    conditions?: Condition[];
    addresses?: { type: string; address: string }[];
  };
}

export interface Namespace extends KubeObject {
  status?: { phase?: string };
}

export interface DataVolume extends KubeObject {
  spec: DataVolumeSpec;
  status?: {
    phase?: string;
    progress?: string;
    conditions?: Condition[];
    claimName?: string;
  };
}

export interface KubeEvent extends KubeObject {
  involvedObject: { kind?: string; name?: string; namespace?: string };
  type?: string;
  reason?: string;
  message?: string;
  count?: number;
  firstTimestamp?: string;
  lastTimestamp?: string;
  eventTime?: string;
  series?: { count?: number; lastObservedTime?: string };
}

export interface PodMetrics extends KubeObject {
  timestamp?: string;
  window?: string;
  containers: { name: string; usage: { cpu?: string; memory?: string } }[];
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

export interface WatchEvent<T = KubeObject> {
  type: WatchEventType;
  object: T;
}

/** The Map key for a (possibly cluster-scoped) object. */
export function objectKey(obj: KubeObject): string {
  const ns = obj.metadata.namespace;
  return ns ? `${ns}/${obj.metadata.name}` : obj.metadata.name ?? '';
}
