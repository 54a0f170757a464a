// The DataVolume the create form describes.
import { isQuantity } from '../api/quantity';
import type { DataVolume, DataVolumeSpec } from '../api/types';

export type DvSource = 'http' | 'registry' | 'blank' | 'upload';

export interface DvForm {
  name: string;
  namespace: string;
  source: DvSource;
  url: string;
  size: string;
}

export const DV_SOURCES: { value: DvSource; label: string }[] = [
  { value: 'http', label: 'Import from URL' },
  { value: 'registry', label: 'Registry' },
  { value: 'blank', label: 'Blank' },
  { value: 'upload', label: 'Upload a file' },
];

/** CDI wants registry sources as docker://…; people type them without. */
export function registryUrl(url: string): string {
  const u = url.trim();
  if (!u) return u;
  return /^(docker|oci-archive):\/\//.test(u) ? u : `docker://${u}`;
}

export function buildDataVolume(f: DvForm): DataVolume {
  let source: DataVolumeSpec['source'];
  switch (f.source) {
    case 'http':
      source = { http: { url: f.url.trim() } };
      break;
    case 'registry':
      source = { registry: { url: registryUrl(f.url) } };
      break;
    case 'blank':
      source = { blank: {} };
      break;
    case 'upload':
      source = { upload: {} };
      break;
  }
  return {
    apiVersion: 'cdi.kubevirt.io/v1beta1',
    kind: 'DataVolume',
    metadata: { name: f.name.trim(), namespace: f.namespace.trim() },
    spec: { source, storage: { resources: { requests: { storage: f.size.trim() } } } },
  };
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export function validateDvForm(f: DvForm, file?: File | null): Partial<Record<keyof DvForm | 'file', string>> {
  const e: Partial<Record<keyof DvForm | 'file', string>> = {};
  if (!DNS_LABEL.test(f.name.trim())) e.name = 'Lower-case letters, digits and "-".';
  if (!DNS_LABEL.test(f.namespace.trim())) e.namespace = 'Not a valid namespace name.';
  if (!isQuantity(f.size.trim())) e.size = 'A quantity such as 5Gi.';
  if (f.source === 'http' && !/^https?:\/\/\S+$/.test(f.url.trim())) e.url = 'An http:// or https:// URL is required.';
  if (f.source === 'registry' && !f.url.trim()) e.url = 'An image reference is required.';
  if (f.source === 'upload' && !file) e.file = 'Choose a disk image file.';
  return e;
}

export function dvSourceText(dv: DataVolume): string {
  const s = dv.spec.source;
  if (!s) return '—';
  if (s.http) return s.http.url;
  if (s.registry) return s.registry.url;
  if (s.blank) return 'blank';
  if (s.upload) return 'upload';
  if (s.pvc) return `clone of ${s.pvc.namespace}/${s.pvc.name}`;
  return Object.keys(s)[0] ?? '—';
}

export function dvSize(dv: DataVolume): string {
  return dv.spec.storage?.resources?.requests?.storage ?? dv.spec.pvc?.resources?.requests?.storage ?? '—';
}
