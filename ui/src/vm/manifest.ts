// The VirtualMachine the create form describes: a pure function of the form's values,
// so the YAML preview and the POST body are the same object.
import { stringify } from 'yaml';
import { isQuantity } from '../api/quantity';
import type { DataVolumeTemplate, Disk, Volume, VirtualMachine } from '../api/types';

export type BootSource = 'containerDisk' | 'url' | 'pvc' | 'blank';
export type NetworkChoice = 'pod' | 'none';

export interface VmForm {
  name: string;
  namespace: string;
  cpuCores: number;
  memory: string;
  bootSource: BootSource;
  containerDiskImage: string;
  imageUrl: string;
  diskSize: string;
  claimName: string;
  sshKey: string;
  cloudInitUser: string;
  network: NetworkChoice;
  start: boolean;
}

export const BOOT_SOURCES: { value: BootSource; label: string }[] = [
  { value: 'containerDisk', label: 'Container disk' },
  { value: 'url', label: 'Import from URL' },
  { value: 'pvc', label: 'Existing PVC' },
  { value: 'blank', label: 'Blank disk' },
];

export const NETWORKS: { value: NetworkChoice; label: string }[] = [
  { value: 'pod', label: 'Pod network (masquerade)' },
  { value: 'none', label: 'None' },
];

export function defaultForm(namespace = 'default'): VmForm {
  return {
    name: '',
    namespace,
    cpuCores: 1,
    memory: '256Mi',
    bootSource: 'containerDisk',
    containerDiskImage: '',
    imageUrl: '',
    diskSize: '5Gi',
    claimName: '',
    sshKey: '',
    cloudInitUser: '',
    network: 'pod',
    start: true,
  };
}

/** The DataVolume a URL import or a blank disk creates, named after the VM. */
export function rootDataVolumeName(vmName: string): string {
  return `${vmName}-rootdisk`;
}

/** `#cloud-config` user data, or null when there is nothing to configure. */
export function cloudConfig(form: Pick<VmForm, 'sshKey' | 'cloudInitUser'>): string | null {
  const keys = form.sshKey
    .split('\n')
    .map((k) => k.trim())
    .filter(Boolean);
  const user = form.cloudInitUser.trim();
  if (!user && keys.length === 0) return null;
  const cfg: Record<string, unknown> = {};
  if (user) cfg.user = user;
  if (keys.length) cfg.ssh_authorized_keys = keys;
  return `#cloud-config\n${stringify(cfg)}`;
}

export function buildVm(form: VmForm): VirtualMachine {
  const name = form.name.trim();
  const disks: Disk[] = [{ name: 'rootdisk', disk: { bus: 'virtio' } }];
  let rootVolume: Volume;
  let dataVolumeTemplates: DataVolumeTemplate[] | undefined;
  const storage = { resources: { requests: { storage: form.diskSize.trim() } } };

  switch (form.bootSource) {
    case 'containerDisk':
      rootVolume = { name: 'rootdisk', containerDisk: { image: form.containerDiskImage.trim() } };
      break;
    case 'url':
      dataVolumeTemplates = [
        { metadata: { name: rootDataVolumeName(name) }, spec: { source: { http: { url: form.imageUrl.trim() } }, storage } },
      ];
      rootVolume = { name: 'rootdisk', dataVolume: { name: rootDataVolumeName(name) } };
      break;
    case 'blank':
      dataVolumeTemplates = [{ metadata: { name: rootDataVolumeName(name) }, spec: { source: { blank: {} }, storage } }];
      rootVolume = { name: 'rootdisk', dataVolume: { name: rootDataVolumeName(name) } };
      break;
    case 'pvc':
      rootVolume = { name: 'rootdisk', persistentVolumeClaim: { claimName: form.claimName.trim() } };
      break;
  }
  const volumes: Volume[] = [rootVolume];

  const userData = cloudConfig(form);
  if (userData) {
    disks.push({ name: 'cloudinitdisk', disk: { bus: 'virtio' } });
    volumes.push({ name: 'cloudinitdisk', cloudInitNoCloud: { userData } });
  }

  const podNetwork = form.network === 'pod';
  const vm: VirtualMachine = {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachine',
    metadata: { name, namespace: form.namespace.trim() },
    spec: {
      runStrategy: form.start ? 'Always' : 'Halted',
      ...(dataVolumeTemplates ? { dataVolumeTemplates } : {}),
      template: {
        metadata: { labels: { 'kubevirt.io/vm': name } },
        spec: {
          domain: {
            cpu: { cores: form.cpuCores },
            memory: { guest: form.memory.trim() },
            devices: podNetwork
              ? { disks, interfaces: [{ name: 'default', masquerade: {} }] }
              : { disks, autoattachPodInterface: false },
          },
          ...(podNetwork ? { networks: [{ name: 'default', pod: {} }] } : {}),
          terminationGracePeriodSeconds: 30,
          volumes,
        },
      },
    },
  };
  return vm;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** Problems with the form, by field; empty when it can be submitted. */
export function validateForm(form: VmForm): Partial<Record<keyof VmForm, string>> {
  const errors: Partial<Record<keyof VmForm, string>> = {};
  const name = form.name.trim();
  if (!name) errors.name = 'A name is required.';
  else if (!DNS_LABEL.test(name) || name.length > 63)
    errors.name = 'Lower-case letters, digits and "-", starting and ending with a letter or digit (at most 63).';
  const ns = form.namespace.trim();
  if (!ns) errors.namespace = 'A namespace is required.';
  else if (!DNS_LABEL.test(ns)) errors.namespace = 'Not a valid namespace name.';
  if (!Number.isInteger(form.cpuCores) || form.cpuCores < 1) errors.cpuCores = 'At least 1 core.';
  if (!isQuantity(form.memory.trim())) errors.memory = 'A quantity such as 256Mi or 2Gi.';
  switch (form.bootSource) {
    case 'containerDisk':
      if (!form.containerDiskImage.trim()) errors.containerDiskImage = 'An image is required.';
      break;
    case 'url':
      if (!/^https?:\/\/\S+$/.test(form.imageUrl.trim())) errors.imageUrl = 'An http:// or https:// URL is required.';
      if (!isQuantity(form.diskSize.trim())) errors.diskSize = 'A quantity such as 5Gi.';
      break;
    case 'blank':
      if (!isQuantity(form.diskSize.trim())) errors.diskSize = 'A quantity such as 5Gi.';
      break;
    case 'pvc':
      if (!form.claimName.trim()) errors.claimName = 'A claim name is required.';
      break;
  }
  return errors;
}

export function toYaml(obj: unknown): string {
  return stringify(obj, { lineWidth: 0 });
}
